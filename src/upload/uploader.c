/* The uploader thread (see uploader.h). It blocks every signal, so sampling
 * never lands on it, and it is the only caller of the sinks. */
#include "uploader.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aggregator/aggregator.h"
#include "aggregator/dwarf.h"
#include "aggregator/symbols.h"
#include "common.h"
#include "contprof/profiler.h"
#include "labels.h"
#include "samplers/threads.h"
#include "stats.h"

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake; /* flush or stop requested */
  pthread_cond_t done; /* a flush completed */
  pthread_t thread;
  int running;
  int stop;
  uint64_t flush_requested, flush_completed;
  cp_sink **sinks;
  size_t nsinks;
  void (*before_export)(cp_generation *g);
  cp_export_meta meta;
  uint64_t period_ns;
  uint64_t period_start_ns;
  uint64_t seq;
  uint64_t exit_timeout_ns; /* CONTPROF_EXIT_TIMEOUT: the whole of stop */
  /* Costs of periods that wrote no profile, carried into the next one. */
  cp_period_stats unreported;
} up = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Swaps generations and sends the finished one to every sink. Runs on the
 * uploader thread without holding up.lock. */
static void export_period(void) {
  uint64_t drops = 0;
  cp_period_stats stats = up.unreported;
  memset(&up.unreported, 0, sizeof up.unreported);
  cp_period_stats swapped = {0};
  cp_generation *g = cp_agg_swap(&drops, &swapped);
  uint64_t end = cp_realtime_ns();
  if (!g) {
    cp_error("out of memory: the period's samples stay in the next profile");
    up.unreported = stats;
    return;
  }
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    stats.samples[k] += swapped.samples[k];
    stats.drops[k] += swapped.drops[k];
  }
  cp_export_meta meta = up.meta;
  meta.start_ns = up.period_start_ns;
  meta.end_ns = end;
  meta.drops = drops;
  cp_endpoint_count *endpoints = NULL;
  meta.nendpoint_counts = cp_trace_endpoint_counts_take(&endpoints);
  meta.endpoint_counts = endpoints;
  up.period_start_ns = end;
  /* A few drops are signals that came while a sampler stopped or nested
   * in another handler; a warning is for a ring that overflows. */
  if (drops > 100 || drops * 20 > cp_gen_samples_added(g))
    cp_warn("%" PRIu64 " samples dropped in period %" PRIu64
            " (ring full); counted in the profile's samples_dropped",
            drops, up.seq);
  else if (drops)
    cp_info("%" PRIu64 " samples dropped in period %" PRIu64
            "; counted in the profile's samples_dropped",
            drops, up.seq);
  if (cp_gen_samples_overflowed(g))
    cp_warn("%" PRIu64 " samples folded into [overflow] in period %" PRIu64
            " (CONTPROF_MAX_MEMORY_MB reached)",
            cp_gen_samples_overflowed(g), up.seq);
  if (up.before_export)
    up.before_export(g);
  cp_stats_take(&stats);
  stats.memory_bytes = cp_gen_memory_used(g) + cp_labels_memory_used() +
                       cp_symbols_memory_used() + cp_dwarf_memory_used() +
                       cp_stats_fixed_memory();
  meta.stats = &stats;
  /* A process that has recorded nothing yet (a short-lived program, such
   * as a shell's child under LD_PRELOAD) writes or uploads no profile.
   * Once one is out, every period gets one, empty or not (the live heap may
   * have gone to nothing). Dropped samples are on the [dropped] stack, so an
   * empty generation has lost nothing. */
  if (up.seq == 0 && cp_gen_samples_added(g) == 0 &&
      meta.nendpoint_counts == 0) {
    cp_debug("period with no samples: no profile");
    up.unreported = stats;
  } else {
    meta.seq = up.seq++;
    for (size_t i = 0; i < up.nsinks; i++)
      up.sinks[i]->send(up.sinks[i], g, &meta);
    cp_stats_publish(&stats);
  }
  free(endpoints);
  cp_gen_destroy(g);
  cp_symbols_collect(cp_agg_oldest_live_generation());
  /* The period's samples are out: label sets unused since the period
   * before can go. */
  cp_labels_collect();
}

static void *uploader_thread(void *arg) {
  (void)arg;
  cp_threads_exclude_self();
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  pthread_mutex_lock(&up.lock);
  for (;;) {
    deadline.tv_sec += (time_t)(up.period_ns / 1000000000ull);
    int flushing = 0;
    while (!up.stop && !flushing) {
      flushing = up.flush_requested > up.flush_completed;
      if (flushing)
        break;
      if (pthread_cond_timedwait(&up.wake, &up.lock, &deadline) != 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > deadline.tv_sec ||
            (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec))
          break;
      }
    }
    uint64_t requested = up.flush_requested;
    int stopping = up.stop;
    pthread_mutex_unlock(&up.lock);
    export_period();
    pthread_mutex_lock(&up.lock);
    if (flushing) {
      up.flush_completed = requested;
      pthread_cond_broadcast(&up.done);
      /* A flush starts a new full period. */
      clock_gettime(CLOCK_MONOTONIC, &deadline);
    }
    if (stopping)
      break;
  }
  pthread_mutex_unlock(&up.lock);
  return NULL;
}

int cp_uploader_start(const cp_config *cfg, cp_sink **sinks, size_t nsinks,
                      const cp_export_meta *meta,
                      void (*before_export)(cp_generation *g)) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&up.wake, &attr);
  pthread_condattr_destroy(&attr);
  pthread_cond_init(&up.done, NULL);
  up.sinks = sinks;
  up.nsinks = nsinks;
  up.before_export = before_export;
  up.meta = *meta;
  up.period_ns = (uint64_t)cfg->upload_period_s * 1000000000ull;
  up.exit_timeout_ns = (uint64_t)cfg->exit_timeout_ms * 1000000ull;
  up.period_start_ns = cp_realtime_ns();
  up.stop = 0;
  memset(&up.unreported, 0, sizeof up.unreported);
  up.seq = 0; /* a start makes a new runtime-id: its profiles count from 0 */
  up.flush_requested = up.flush_completed = 0;
  int rc = cp_start_internal_thread(&up.thread, uploader_thread, NULL,
                                    "contprof-upload");
  if (rc != 0) {
    cp_error("cannot start the uploader thread: %s", strerror(rc));
    return CONTPROF_ERR_SYSTEM;
  }
  up.running = 1;
  return 0;
}

int cp_uploader_flush(void) {
  pthread_mutex_lock(&up.lock);
  if (!up.running || up.stop) {
    pthread_mutex_unlock(&up.lock);
    return CONTPROF_ERR_NOT_STARTED;
  }
  uint64_t ticket = ++up.flush_requested;
  pthread_cond_signal(&up.wake);
  while (up.flush_completed < ticket && up.running)
    pthread_cond_wait(&up.done, &up.lock);
  pthread_mutex_unlock(&up.lock);
  return 0;
}

void cp_uploader_after_fork_child(void) {
  pthread_mutex_init(&up.lock, NULL);
  if (!up.running)
    return;
  up.running = 0;
  for (size_t i = 0; i < up.nsinks; i++)
    up.sinks[i]->destroy(up.sinks[i]);
  free(up.sinks);
  up.sinks = NULL;
  up.nsinks = 0;
}

void cp_uploader_stop(void) {
  uint64_t deadline = cp_monotonic_ns() + up.exit_timeout_ns;
  pthread_mutex_lock(&up.lock);
  if (!up.running) {
    pthread_mutex_unlock(&up.lock);
    return;
  }
  up.stop = 1;
  pthread_cond_signal(&up.wake);
  pthread_mutex_unlock(&up.lock);
  pthread_join(up.thread, NULL);
  pthread_mutex_lock(&up.lock);
  up.running = 0;
  pthread_cond_broadcast(&up.done);
  pthread_mutex_unlock(&up.lock);
  /* Every sink delivers its last profiles at once, all by one deadline. */
  for (size_t i = 0; i < up.nsinks; i++)
    if (up.sinks[i]->finish)
      up.sinks[i]->finish(up.sinks[i], deadline);
  for (size_t i = 0; i < up.nsinks; i++)
    up.sinks[i]->destroy(up.sinks[i]);
  free(up.sinks);
  up.sinks = NULL;
  up.nsinks = 0;
  pthread_cond_destroy(&up.wake);
  pthread_cond_destroy(&up.done);
}
