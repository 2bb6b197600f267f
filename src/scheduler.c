/* The period scheduler (see scheduler.h). Its thread blocks every signal, so
 * sampling never lands on it (but for the kernel-cost measurement's own
 * signals, samplers/kernel_cost.h); it and, before it starts, the thread that
 * stops the profiler are the only callers of the uploader.
 *
 * The thread starts at the first tick a second after the start (or at a
 * flush), not with the profiler: it only waits for the period's end, and a
 * process that lives less than a second (a shell's child under LD_PRELOAD,
 * a forking server's child that serves one connection) would create and
 * join it for nothing. Such a process exports its one profile at stop, on
 * the stopping thread, which would otherwise wait for the thread to do it
 * (docs/overhead.md, "Short-lived processes"). */
#include "scheduler.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aggregator/aggregator.h"
#include "common.h"
#include "config.h"
#include "contprof/profiler.h"
#include "stats.h"
#include "trace.h"
#include "upload/uploader.h"

#define SCHED_JOBS 4 /* cp_scheduler_run_soon's jobs waiting at once */

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake; /* flush or stop requested */
  pthread_cond_t done; /* a flush completed */
  pthread_t thread;
  int running;        /* started and not stopped: flush and stop act */
  int thread_running; /* the thread was started (cp_scheduler_tick) */
  int stop;
  uint64_t started_ns;  /* monotonic, at start */
  uint64_t deadline_ns; /* monotonic: the current period's end */
  uint64_t flush_requested, flush_completed;
  /* cp_scheduler_run_soon's, not yet run: distinct, in the order asked. */
  void (*jobs[SCHED_JOBS])(void);
  int njobs;
  void (*before_close)(void);
  void (*before_export)(cp_generation *g);
  cp_export_meta meta;
  uint64_t period_ns;
  uint64_t period_start_ns;
  uint64_t seq;
  uint64_t exit_timeout_ns; /* CONTPROF_EXIT_TIMEOUT: the whole of stop */
  /* Costs of periods that wrote no profile, carried into the next one. */
  cp_period_stats unreported;
} sched = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Closes the period (the last one: the profiler stops): swaps generations
 * and has the finished one delivered. Runs on the scheduler's thread
 * without holding sched.lock. */
static void close_period(int last) {
  uint64_t drops = 0;
  cp_period_stats stats = sched.unreported;
  memset(&sched.unreported, 0, sizeof sched.unreported);
  if (sched.before_close)
    sched.before_close();
  cp_period_stats swapped = {0};
  cp_generation *g =
      last ? cp_agg_swap_last(&drops, &swapped) : cp_agg_swap(&drops, &swapped);
  uint64_t end = cp_realtime_ns();
  if (!g) {
    cp_error("out of memory: the period's samples stay in the next profile");
    sched.unreported = stats;
    return;
  }
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    stats.samples[k] += swapped.samples[k];
    stats.drops[k] += swapped.drops[k];
  }
  cp_export_meta meta = sched.meta;
  meta.start_ns = sched.period_start_ns;
  meta.end_ns = end;
  meta.drops = drops;
  /* Requests per endpoint are counted by trace.c as tracers report them;
   * the period takes its share at the same moment as its generation. */
  cp_endpoint_count *endpoints = NULL;
  meta.nendpoint_counts = cp_trace_endpoint_counts_take(&endpoints);
  meta.endpoint_counts = endpoints;
  sched.period_start_ns = end;
  /* A few drops are signals that came while a sampler stopped or nested
   * in another handler; a warning is for a ring that overflows, which drops
   * more than a few (a child of fork that lived a moment had 1 drop for its
   * 10 samples, and warned of a full ring at every exit). */
  if (drops > 100 || (drops >= 16 && drops * 20 > cp_gen_samples_added(g)))
    cp_warn("%" PRIu64 " samples dropped in period %" PRIu64
            " (ring full); counted in the profile's samples_dropped",
            drops, sched.seq);
  else if (drops)
    cp_info("%" PRIu64 " samples dropped in period %" PRIu64
            "; counted in the profile's samples_dropped",
            drops, sched.seq);
  if (cp_gen_samples_overflowed(g))
    cp_warn("%" PRIu64 " samples folded into [overflow] in period %" PRIu64
            " (CONTPROF_MAX_MEMORY_MB reached)",
            cp_gen_samples_overflowed(g), sched.seq);
  if (sched.before_export)
    sched.before_export(g);
  cp_stats_take(&stats);
  stats.memory_bytes = cp_agg_memory_used(g) + cp_stats_fixed_memory();
  stats.profiles = meta.cfg->profiles;
  stats.max_overhead_pct = meta.cfg->max_overhead_pct;
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
    stats.rate[k] = stats.profiles & cp_kinds[k].profile
                        ? cp_config_rate(meta.cfg, (contprof_sample_kind)k,
                                         stats.slowdown[cp_kinds[k].sampled_as])
                        : 0;
  meta.stats = &stats;
  /* A process that has recorded nothing yet (a short-lived program, such
   * as a shell's child under LD_PRELOAD) writes or uploads no profile.
   * Once one is out, every period gets one, empty or not (the live heap may
   * have gone to nothing). Dropped samples are on the [dropped] stack, so an
   * empty generation has lost nothing. */
  if (sched.seq == 0 && cp_gen_samples_added(g) == 0 &&
      meta.nendpoint_counts == 0) {
    cp_debug("period with no samples: no profile");
    sched.unreported = stats;
  } else {
    meta.seq = sched.seq++;
    cp_export e;
    cp_export_init(&e, g, &meta);
    cp_uploader_deliver(&e);
    cp_export_release(&e);
    cp_stats_publish(&stats);
  }
  free(endpoints);
  cp_agg_retire(g);
}

static void *scheduler_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&sched.lock);
  for (;;) {
    int flushing = 0;
    while (!sched.stop && !flushing) {
      if (sched.njobs) {
        void (*job)(void) = sched.jobs[0];
        memmove(sched.jobs, sched.jobs + 1,
                (size_t)--sched.njobs * sizeof *sched.jobs);
        pthread_mutex_unlock(&sched.lock);
        job();
        pthread_mutex_lock(&sched.lock);
        continue;
      }
      flushing = sched.flush_requested > sched.flush_completed;
      if (flushing)
        break;
      struct timespec deadline = {
          .tv_sec = (time_t)(sched.deadline_ns / 1000000000ull),
          .tv_nsec = (long)(sched.deadline_ns % 1000000000ull)};
      if (pthread_cond_timedwait(&sched.wake, &sched.lock, &deadline) != 0 &&
          cp_monotonic_ns() >= sched.deadline_ns)
        break;
    }
    uint64_t requested = sched.flush_requested;
    int stopping = sched.stop;
    pthread_mutex_unlock(&sched.lock);
    close_period(stopping);
    pthread_mutex_lock(&sched.lock);
    if (flushing) {
      sched.flush_completed = requested;
      pthread_cond_broadcast(&sched.done);
      /* A flush starts a new full period. */
      sched.deadline_ns = cp_monotonic_ns() + sched.period_ns;
    } else {
      sched.deadline_ns += sched.period_ns;
    }
    if (stopping)
      break;
  }
  pthread_mutex_unlock(&sched.lock);
  return NULL;
}

/* Caller holds sched.lock. Starts the thread unless it runs; 0 or an
 * error number. */
static int start_thread_locked(void) {
  if (sched.thread_running)
    return 0;
  int rc = cp_start_joined_thread(&sched.thread, scheduler_thread, NULL,
                                  "contprof-upload");
  if (rc != 0)
    return rc;
  sched.thread_running = 1;
  return 0;
}

int cp_scheduler_start(const cp_config *cfg, cp_sink **sinks, size_t nsinks,
                       const cp_export_meta *meta, void (*before_close)(void),
                       void (*before_export)(cp_generation *g)) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&sched.wake, &attr);
  pthread_condattr_destroy(&attr);
  pthread_cond_init(&sched.done, NULL);
  cp_uploader_start(sinks, nsinks);
  sched.before_close = before_close;
  sched.before_export = before_export;
  sched.meta = *meta;
  sched.period_ns = (uint64_t)cfg->upload_period_s * 1000000000ull;
  sched.exit_timeout_ns = (uint64_t)cfg->exit_timeout_ms * 1000000ull;
  sched.period_start_ns = cp_realtime_ns();
  sched.started_ns = cp_monotonic_ns();
  sched.deadline_ns = sched.started_ns + sched.period_ns;
  sched.stop = 0;
  memset(&sched.unreported, 0, sizeof sched.unreported);
  sched.seq = 0; /* a start makes a new runtime-id: its profiles count from 0 */
  sched.flush_requested = sched.flush_completed = 0;
  sched.njobs = 0;
  sched.thread_running = 0;
  sched.running = 1;
  return 0;
}

void cp_scheduler_tick(void) {
  pthread_mutex_lock(&sched.lock);
  if (sched.running && !sched.stop && !sched.thread_running &&
      cp_monotonic_ns() - sched.started_ns >= CP_SCHEDULER_THREAD_AFTER_NS) {
    int rc = start_thread_locked();
    if (rc != 0) {
      /* Tried again at the next tick; meanwhile the samples wait in the
       * generation, exported at the next period's end or at stop. */
      static int warned;
      if (!warned++)
        cp_error("cannot start the uploader thread: %s", strerror(rc));
    }
  }
  pthread_mutex_unlock(&sched.lock);
}

int cp_scheduler_run_soon(void (*job)(void)) {
  pthread_mutex_lock(&sched.lock);
  int rc = -1;
  if (sched.running && !sched.stop && start_thread_locked() == 0) {
    int i = 0;
    while (i < sched.njobs && sched.jobs[i] != job)
      i++;
    if (i == sched.njobs && sched.njobs < SCHED_JOBS)
      sched.jobs[sched.njobs++] = job;
    rc = i < sched.njobs ? 0 : -1;
    pthread_cond_signal(&sched.wake);
  }
  pthread_mutex_unlock(&sched.lock);
  return rc;
}

int cp_scheduler_flush(void) {
  pthread_mutex_lock(&sched.lock);
  if (!sched.running || sched.stop) {
    pthread_mutex_unlock(&sched.lock);
    return CONTPROF_ERR_NOT_STARTED;
  }
  int rc = start_thread_locked();
  if (rc != 0) {
    pthread_mutex_unlock(&sched.lock);
    cp_error("cannot start the uploader thread: %s", strerror(rc));
    return CONTPROF_ERR_SYSTEM;
  }
  uint64_t ticket = ++sched.flush_requested;
  pthread_cond_signal(&sched.wake);
  while (sched.flush_completed < ticket && sched.running)
    pthread_cond_wait(&sched.done, &sched.lock);
  pthread_mutex_unlock(&sched.lock);
  return 0;
}

void cp_scheduler_after_fork_child(void) {
  pthread_mutex_init(&sched.lock, NULL);
  if (!sched.running)
    return;
  sched.running = 0;
  sched.thread_running = 0;
  sched.njobs = 0;
  cp_uploader_after_fork_child();
}

void cp_scheduler_stop(void) {
  uint64_t deadline = cp_monotonic_ns() + sched.exit_timeout_ns;
  pthread_mutex_lock(&sched.lock);
  if (!sched.running) {
    pthread_mutex_unlock(&sched.lock);
    return;
  }
  sched.stop = 1;
  int thread_running = sched.thread_running;
  pthread_cond_signal(&sched.wake);
  pthread_mutex_unlock(&sched.lock);
  if (thread_running)
    cp_join_thread(sched.thread);
  else
    close_period(1); /* the thread never started: the last period here */
  pthread_mutex_lock(&sched.lock);
  sched.thread_running = 0;
  sched.running = 0;
  pthread_cond_broadcast(&sched.done);
  pthread_mutex_unlock(&sched.lock);
  cp_uploader_stop(deadline);
  pthread_cond_destroy(&sched.wake);
  pthread_cond_destroy(&sched.done);
}
