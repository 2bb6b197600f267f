/* The public API: start, stop, flush, and the bindings' sample recording.
 * Wires config -> samplers -> aggregator -> uploader -> sinks, and writes the
 * last profile at exit. One mutex serialises the lifecycle calls. */
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "aggregator/aggregator.h"
#include "aggregator/symbols.h"
#include "common.h"
#include "config.h"
#include "contprof/profiler.h"
#include "contprof/runtime.h"
#include "labels.h"
#include "samplers/sampler.h"
#include "samplers/threads.h"
#include "upload/sink.h"
#include "upload/uploader.h"

static const cp_sampler *const all_samplers[] = {
    &cp_cpu_sampler, &cp_lock_sampler, &cp_wall_sampler, &cp_alloc_sampler};

static struct {
  pthread_mutex_t lock;
  _Atomic int running;
  int atexit_registered;
  cp_config cfg;
  const cp_sampler *active[CP_ARRAY_SIZE(all_samplers)];
  size_t nactive;
  char host[256];
  char runtime_id[37];
} prof = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void make_uuid(char out[37]) {
  unsigned char b[16];
  if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
    uint64_t x = cp_realtime_ns() ^ ((uint64_t)getpid() << 32);
    for (size_t i = 0; i < sizeof b; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      b[i] = (unsigned char)(x >> 56);
    }
  }
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
  snprintf(out, 37,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x"
           "%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
           b[11], b[12], b[13], b[14], b[15]);
}

static void stop_at_exit(void) {
  if (atomic_load(&prof.running))
    contprof_stop();
}

static void tick(void) { cp_threads_rescan(); }

/* On the uploader thread: samplers add snapshot samples (the live heap). The
 * active list only changes under prof.lock while the uploader is stopped. */
static void before_export(cp_generation *g) {
  for (size_t i = 0; i < prof.nactive; i++)
    if (prof.active[i]->before_export)
      prof.active[i]->before_export(g);
}

/* The child of fork has only the forking thread: the profiler's threads and
 * timers are gone. It forgets the parent's state (without taking locks that a
 * lost thread may hold) and is not profiled; the parent's profile is not
 * affected. */
static void after_fork_child(void) {
  pthread_mutex_init(&prof.lock, NULL);
  cp_gettid_reset();
  if (!atomic_load(&prof.running))
    return;
  atomic_store(&prof.running, 0);
  for (size_t i = 0; i < prof.nactive; i++)
    if (prof.active[i]->after_fork_child)
      prof.active[i]->after_fork_child();
  prof.nactive = 0;
  cp_threads_after_fork_child();
  cp_uploader_after_fork_child();
  cp_agg_after_fork_child();
  cp_symbols_reset();
  cp_config_free(&prof.cfg);
}

/* Stops what start_locked started, in reverse order. */
static void teardown_locked(void) {
  for (size_t i = prof.nactive; i-- > 0;)
    prof.active[i]->stop();
  cp_threads_stop();
  /* The last profile still gets the snapshot samplers' samples (the live
   * heap as it is at stop): the active list is cleared after it is made. */
  cp_uploader_stop();
  prof.nactive = 0;
  cp_agg_stop();
  cp_config_free(&prof.cfg);
}

static int start_locked(const contprof_options *opts) {
  int rc = cp_config_load(&prof.cfg, opts, NULL, NULL);
  if (rc)
    return rc;
  if (!prof.cfg.enabled) {
    cp_info("profiling disabled by CONTPROF_ENABLED");
    cp_config_free(&prof.cfg);
    return CONTPROF_ERR_DISABLED;
  }
  cp_symbols_init();
  if ((rc = cp_agg_start(&prof.cfg, tick))) {
    cp_config_free(&prof.cfg);
    return rc;
  }

  size_t nsinks = 0;
  cp_sink **sinks = cp_sinks_create(&prof.cfg, &nsinks);
  if (!sinks) {
    cp_agg_stop();
    cp_config_free(&prof.cfg);
    return CONTPROF_ERR_NOMEM;
  }
  if (gethostname(prof.host, sizeof prof.host) != 0)
    snprintf(prof.host, sizeof prof.host, "unknown");
  make_uuid(prof.runtime_id);
  cp_export_meta meta = {
      .cfg = &prof.cfg,
      .host = prof.host,
      .pid = getpid(),
      .runtime_id = prof.runtime_id,
      .runtime = "native",
      .runtime_version = gnu_get_libc_version(),
      .cpu_period_ns = 1000000000 / prof.cfg.cpu_hz,
  };
  if ((rc = cp_uploader_start(&prof.cfg, sinks, nsinks, &meta,
                              before_export))) {
    cp_sinks_destroy(sinks, nsinks);
    cp_agg_stop();
    cp_config_free(&prof.cfg);
    return rc;
  }

  prof.nactive = 0;
  for (size_t i = 0; i < CP_ARRAY_SIZE(all_samplers); i++) {
    const cp_sampler *s = all_samplers[i];
    if (!(prof.cfg.profiles & s->profile))
      continue;
    if ((rc = s->start(&prof.cfg))) {
      cp_error("cannot start the %s sampler: %s", s->name,
               contprof_strerror(rc));
      continue;
    }
    prof.active[prof.nactive++] = s;
  }
  cp_threads_start(prof.active, prof.nactive);

  char profiles[64];
  cp_info("profiling %s (%s) at %d Hz, a profile every %d s into %s",
          prof.cfg.service,
          cp_profiles_string(prof.cfg.profiles, profiles, sizeof profiles),
          prof.cfg.cpu_hz, prof.cfg.upload_period_s, prof.cfg.output_dir);
  return 0;
}

int contprof_start(const contprof_options *opts) {
  pthread_mutex_lock(&prof.lock);
  int rc;
  if (atomic_load(&prof.running)) {
    rc = CONTPROF_ERR_ALREADY_STARTED;
  } else if ((rc = start_locked(opts)) == 0) {
    atomic_store(&prof.running, 1);
    if (!prof.atexit_registered) {
      atexit(stop_at_exit);
      pthread_atfork(NULL, NULL, after_fork_child);
      prof.atexit_registered = 1;
    }
  }
  pthread_mutex_unlock(&prof.lock);
  return rc;
}

int contprof_stop(void) {
  pthread_mutex_lock(&prof.lock);
  if (!atomic_load(&prof.running)) {
    pthread_mutex_unlock(&prof.lock);
    return CONTPROF_ERR_NOT_STARTED;
  }
  atomic_store(&prof.running, 0);
  teardown_locked();
  pthread_mutex_unlock(&prof.lock);
  return 0;
}

int contprof_flush(void) {
  pthread_mutex_lock(&prof.lock);
  int rc = atomic_load(&prof.running) ? cp_uploader_flush()
                                      : CONTPROF_ERR_NOT_STARTED;
  pthread_mutex_unlock(&prof.lock);
  return rc;
}

int contprof_is_running(void) { return atomic_load(&prof.running); }

const char *contprof_strerror(int status) {
  switch (status) {
  case CONTPROF_OK:
    return "success";
  case CONTPROF_ERR_INVALID:
    return "invalid argument or option";
  case CONTPROF_ERR_ALREADY_STARTED:
    return "the profiler is already running";
  case CONTPROF_ERR_NOT_STARTED:
    return "the profiler is not running";
  case CONTPROF_ERR_DISABLED:
    return "profiling is disabled (CONTPROF_ENABLED)";
  case CONTPROF_ERR_NOMEM:
    return "out of memory";
  case CONTPROF_ERR_SYSTEM:
    return "a system call failed";
  case CONTPROF_ERR_IO:
    return "a profile could not be written";
  case CONTPROF_ERR_LABELS_FULL:
    return "too many labels or label sets";
  default:
    return "unknown status";
  }
}

int contprof_record_sample(const uint64_t *frames, size_t nframes, pid_t tid,
                           uint32_t labels, contprof_sample_kind kind,
                           int64_t count, int64_t quantity) {
  if ((!frames && nframes) || (unsigned)kind >= CONTPROF_KIND_COUNT)
    return CONTPROF_ERR_INVALID;
  if (!atomic_load(&prof.running))
    return CONTPROF_ERR_NOT_STARTED;
  cp_sample_key key = {
      .labels =
          labels == CONTPROF_LABELS_OF_CALLER ? cp_labels_current() : labels,
      .tid = tid ? tid : cp_gettid(),
  };
  return cp_agg_record(frames, nframes, &key, kind, count, quantity);
}
