/* libdw and libelf loaded on demand (see dw_lib.h). */
#include "aggregator/dw_lib.h"

#include <dlfcn.h>
#include <stddef.h>

#include "common.h"

cp_dw_lib cp_dw;

#define LIBDW "libdw.so.1" /* Debian: libdw1, which depends on libelf1 */

int cp_dw_load(void) {
  static int state; /* 0: not tried, 1: loaded, -1: not available */
  if (state)
    return state > 0;
  state = -1;
  /* By soname: in a privileged (secure-mode) process the loader searches
   * only the system's directories (docs/security.md). RTLD_LOCAL keeps its
   * symbols out of the application's lookups. */
  void *lib = dlopen(LIBDW, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    cp_warn("cannot load %s (Debian: libdw1): profiles get function names "
            "but no file:line or inlined frames",
            LIBDW);
    return 0;
  }
  const char *missing = NULL;
#define CP_DW_FIND(name)                                                       \
  if (!missing && !(*(void **)&cp_dw.name = dlsym(lib, #name)))                \
    missing = #name;
  CP_DW_FUNCTIONS(CP_DW_FIND)
#undef CP_DW_FIND
  if (missing) {
    cp_warn("%s has no %s: profiles get function names but no file:line or "
            "inlined frames",
            LIBDW, missing);
    dlclose(lib);
    return 0;
  }
  cp_dw.elf_version(EV_CURRENT);
  state = 1;
  return 1;
}
