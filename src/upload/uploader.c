/* The uploader (see uploader.h): the set of sinks a running profiler
 * delivers to. Called only from the scheduler's thread, and from start,
 * stop and fork, which the scheduler orders with it. */
#include "uploader.h"

#include <stdlib.h>

static struct {
  cp_sink **sinks;
  size_t nsinks;
} up;

void cp_uploader_start(cp_sink **sinks, size_t nsinks) {
  up.sinks = sinks;
  up.nsinks = nsinks;
}

void cp_uploader_deliver(cp_export *e) {
  for (size_t i = 0; i < up.nsinks; i++)
    up.sinks[i]->send(up.sinks[i], e);
}

void cp_uploader_forget(void) {
  up.sinks = NULL;
  up.nsinks = 0;
}

static void destroy_sinks(void) {
  for (size_t i = 0; i < up.nsinks; i++)
    up.sinks[i]->destroy(up.sinks[i]);
  free(up.sinks);
  cp_uploader_forget();
}

void cp_uploader_after_fork_child(void) { destroy_sinks(); }

void cp_uploader_stop(uint64_t deadline_ns) {
  /* Every sink delivers its last profiles at once, all by one deadline. */
  for (size_t i = 0; i < up.nsinks; i++)
    if (up.sinks[i]->finish)
      up.sinks[i]->finish(up.sinks[i], deadline_ns);
  destroy_sinks();
}
