/* The per-thread credential family: capset and prctl. After the
 * application's call succeeds on its thread, the profiler's threads make the
 * same change on themselves (samplers/creds.h says why: glibc aborts a
 * process whose threads do not all succeed at a later setresgid). Calls from
 * the profiler's own threads, failed calls, and every other prctl option
 * pass through untouched. */
#include <errno.h>
#include <linux/capability.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common.h"
#include "interpose/real.h"
#include "passthrough.h"
#include "samplers/creds.h"
#include "thread_state.h"

typedef int (*capset_fn)(cap_user_header_t, const cap_user_data_t);
typedef int (*prctl_fn)(int, ...);

int capset(cap_user_header_t hdr, const cap_user_data_t data);

CP_PASSTHROUGH int capset(cap_user_header_t hdr, const cap_user_data_t data) {
  CP_REAL(capset_fn, capset);
  int rc = fn_capset(hdr, data);
  if (rc == 0 && hdr && data && (hdr->pid == 0 || hdr->pid == cp_gettid())) {
    int saved = errno;
    cp_creds_on_capset(hdr, data);
    errno = saved;
  }
  return rc;
}

CP_PASSTHROUGH int prctl(int option, ...) {
  va_list ap;
  va_start(ap, option);
  unsigned long a2 = va_arg(ap, unsigned long);
  unsigned long a3 = va_arg(ap, unsigned long);
  unsigned long a4 = va_arg(ap, unsigned long);
  unsigned long a5 = va_arg(ap, unsigned long);
  va_end(ap);
  CP_REAL(prctl_fn, prctl);
  int rc = fn_prctl(option, a2, a3, a4, a5);
  if (rc == 0 && (option == PR_SET_KEEPCAPS || option == PR_SET_SECUREBITS ||
                  option == PR_CAPBSET_DROP ||
                  (option == PR_CAP_AMBIENT && a2 != PR_CAP_AMBIENT_IS_SET))) {
    int saved = errno;
    cp_creds_on_prctl(option, a2, a3);
    errno = saved;
  }
  return rc;
}
