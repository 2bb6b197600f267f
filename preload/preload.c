/* The LD_PRELOAD entry: LD_PRELOAD=libcontprof_preload.so PROGRAM starts the
 * profiler from the environment before main; the last profile is written at
 * exit by the library's exit handler. Nothing here can fail the program. */
#include "contprof/profiler.h"

__attribute__((constructor)) static void contprof_preload_start(void) {
  /* Errors are reported by the library with one `contprof:` line. */
  (void)contprof_start(0);
}
