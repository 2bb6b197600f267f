/* The public API: start, stop, flush, and the bindings' sample recording.
 * Wires config -> samplers -> aggregator -> scheduler -> uploader -> sinks,
 * and writes the last profile at exit. One mutex serialises the lifecycle
 * calls. */
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aggregator/aggregator.h"
#include "aggregator/dwarf.h"
#include "aggregator/fork_hints.h"
#include "aggregator/symbols.h"
#include "common.h"
#include "config.h"
#include "contprof/profiler.h"
#include "contprof/runtime.h"
#include "exec.h"
#include "fork_guard.h"
#include "interpose/real.h"
#include "labels.h"
#include "passthrough.h"
#include "profiler_internal.h"
#include "samplers/creds.h"
#include "samplers/fpwalk.h"
#include "samplers/governor.h"
#include "samplers/kernel_cost.h"
#include "samplers/sampler.h"
#include "samplers/signals.h"
#include "samplers/thread_names.h"
#include "samplers/threads.h"
#include "samplers/unwind.h"
#include "scheduler.h"
#include "stats.h"
#include "thread_state.h"
#include "trace.h"
#include "upload/sink.h"

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
  /* The binding's runtime (contprof_start_runtime), else has_runtime = 0. */
  contprof_runtime runtime;
  int has_runtime;
  char runtime_name[32];
  char runtime_version[64];
  int stopped_for_exec; /* cp_profiler_before_exec stopped it */
  _Atomic pid_t pid;    /* the process that started it (a vfork child: not) */
  _Atomic int follow_exec;
  /* The process has forked since it started (or, in a child, since its
   * fork); what the children would otherwise each resolve is resolved
   * here once (tick). */
  _Atomic int forked;
  int hooks_resolved;
} prof = {.lock = PTHREAD_MUTEX_INITIALIZER, .follow_exec = 1};

/* The generation being exported while the runtime's before_export runs on
 * the uploader thread: where contprof_record puts snapshot samples. */
static CP_TLS cp_generation *snapshot_gen;

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
  /* By hand, not snprintf: the child of fork makes a runtime-id as it
   * starts again, and its first snprintf, which faults in stdio's and the
   * locale's pages, was one of the costliest parts of that restart in
   * `perf record` of bench/fork_work. */
  static const char hex[] = "0123456789abcdef";
  size_t at = 0;
  for (size_t i = 0; i < sizeof b; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      out[at++] = '-';
    out[at++] = hex[b[i] >> 4];
    out[at++] = hex[b[i] & 15];
  }
  out[at] = 0;
}

static void stop_at_exit(void) {
  if (atomic_load(&prof.running))
    contprof_stop();
}

void cp_profiler_thread_leaving(void) {
  if (atomic_load(&prof.running) && atomic_load(&prof.pid) == getpid() &&
      cp_threads_others_are_ours()) {
    cp_info("the application's last thread leaves with pthread_exit: the "
            "profiler stops, so that the process ends");
    stop_at_exit();
  }
}

/* The unwinder's table on the scheduler's thread, not on the drain
 * thread that calls tick and drained: the drain thread classifying
 * every function of every object (7 ms of CPU with jemalloc and
 * libstdc++, preempted midway on a busy machine) let a program that
 * allocates as fast as it can fill the sample ring (docs/signals.md). */
static void unwind_soon(void) {
  if (cp_scheduler_run_soon(cp_unwind_tick) != 0)
    cp_unwind_tick();
}

static void drained(void) {
  if (cp_unwind_early_due())
    unwind_soon();
  /* Once per process, on this thread rather than at the start (where the
   * hooks are timed on the thread's CPU clock, 16 system calls a
   * short-lived process need not wait for): what the timed hooks take off
   * as the clock's own cost (docs/overhead.md, "Handlers and hooks"). The
   * calls timed before it count the clock with them. The monotonic clock's
   * is measured at the start, with its choice. */
  if (cp_stats_clock_pair_ns() < 0) {
    cp_stats_calibrate();
    cp_debug("timing the hooks on the thread's CPU clock: two reads take "
             "%lld ns, taken off each timed call",
             (long long)cp_stats_clock_pair_ns());
  }
}

static void tick(void) {
  if (atomic_load(&prof.forked) && !prof.hooks_resolved) {
    prof.hooks_resolved = 1;
    cp_interpose_resolve_all();
  }
  cp_threads_rescan();
  if (cp_unwind_tick_due()) /* objects loaded or unloaded since */
    unwind_soon();
  cp_governor_tick();
  cp_scheduler_tick(); /* the uploader's thread, after the first second */
  /* On the scheduler's thread, or at the next tick. */
  if (cp_kernel_cost_due() && cp_scheduler_run_soon(cp_kernel_cost_measure))
    cp_kernel_cost_postpone();
}

/* On the scheduler's thread as a period closes: samplers record what they
 * counted and did not record yet (the wall sampler's parked time). The
 * active list only changes under prof.lock while the scheduler is
 * stopped. */
static void before_close(void) {
  for (size_t i = 0; i < prof.nactive; i++)
    if (prof.active[i]->before_close)
      prof.active[i]->before_close();
}

/* On the uploader thread: samplers add snapshot samples (the live heap). The
 * active list only changes under prof.lock while the uploader is stopped. */
static void before_export(cp_generation *g) {
  for (size_t i = 0; i < prof.nactive; i++)
    if (prof.active[i]->before_export)
      prof.active[i]->before_export(g);
  if (prof.has_runtime && prof.runtime.before_export) {
    snapshot_gen = g;
    prof.runtime.before_export(prof.runtime.ctx);
    snapshot_gen = NULL;
  }
}

/* The CP_PROFILE_* bits a binding samples itself. */
static unsigned self_sampled_profiles(void) {
  unsigned bits = 0;
  if (prof.has_runtime)
    for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
      if (prof.runtime.self_sampled & CONTPROF_SELF(k))
        bits |= cp_kinds[k].profile;
  return bits;
}

static int start_configured(int forked_child);

/* Starts again from the configuration kept in prof.cfg (the child of fork, a
 * failed exec); if that fails, the configuration is forgotten. Not sampled
 * as the application's allocations. */
static void restart_kept_config(int forked_child) {
  cp_alloc_guard_begin();
  int rc = start_configured(forked_child);
  cp_alloc_guard_end();
  if (rc == 0) {
    atomic_store(&prof.running, 1);
  } else {
    cp_config_free(&prof.cfg);
    prof.has_runtime = 0;
  }
}
/* prof.lock first: a thread starting the profiler holds it and may list the
 * loaded objects or unwind; then no thread inside the loader's or
 * libunwind's code (fork_guard.h). */
static void after_fork_prepare(void) {
  cp_own_stacks_before_fork();
  pthread_mutex_lock(&prof.lock);
  if (atomic_load(&prof.running))
    cp_symbols_before_fork();
  cp_fork_guard_prepare();
}
static void after_fork_parent(void) {
  cp_own_stacks_after_fork_parent();
  cp_fork_guard_parent();
  if (atomic_load(&prof.running)) {
    cp_symbols_after_fork_parent();
    atomic_store(&prof.forked, 1);
  }
  pthread_mutex_unlock(&prof.lock);
}

/* The child of fork has only the forking thread: the profiler's threads and
 * timers are gone. It forgets the parent's state (the prepare handler held
 * prof.lock across fork, so no start or stop was half done; other locks a
 * lost thread may hold are made anew) and, with CONTPROF_FOLLOW_FORK (the
 * default), starts again as a process of its own: new pid and runtime-id, an
 * empty profile, the same configuration. The parent is not affected. */
static void after_fork_child(void) {
  pthread_mutex_init(&prof.lock, NULL);
  cp_gettid_reset();
  cp_own_stacks_after_fork_child();
  cp_fork_guard_child();
  cp_fpwalk_after_fork_child();
  atomic_store(&prof.forked, 0);
  if (!atomic_load(&prof.running))
    return;
  atomic_store(&prof.running, 0);
  for (size_t i = 0; i < prof.nactive; i++)
    if (prof.active[i]->after_fork_child)
      prof.active[i]->after_fork_child();
  prof.nactive = 0;
  cp_signals_after_fork_child();
  cp_threads_after_fork_child();
  cp_creds_after_fork_child();
  cp_interpose_after_fork_child();
  cp_scheduler_after_fork_child();
  cp_agg_after_fork_child();
  cp_thread_names_after_fork_child();
  cp_stats_after_fork_child();
  cp_kernel_cost_after_fork_child();
  cp_governor_after_fork_child();
  cp_symbols_after_fork_child();
  cp_dwarf_after_fork_child();
  cp_labels_set_profiling(0); /* the parent's samples are gone */
  if (prof.cfg.follow_fork) {
    restart_kept_config(1);
  } else {
    cp_config_free(&prof.cfg);
    prof.has_runtime = 0;
  }
}

/* Stops what start_configured started, in reverse order. */
static void teardown_locked(int keep_config) {
  cp_interpose_before_dlclose(NULL);
  cp_governor_stop();
  for (size_t i = prof.nactive; i-- > 0;)
    prof.active[i]->stop();
  cp_threads_stop();
  /* The last profile still gets the snapshot samplers' samples (the live
   * heap as it is at stop): the active list is cleared after it is made. */
  cp_scheduler_stop();
  prof.nactive = 0;
  cp_agg_stop();
  /* Nothing is pending: label sets no one holds can go now. */
  cp_labels_set_profiling(0);
  if (!keep_config)
    cp_config_free(&prof.cfg);
}

/* A binding's options first, then the environment (read by config.c). */
static const char *runtime_option(const char *name, void *ctx) {
  (void)ctx;
  const char *v =
      prof.runtime.option ? prof.runtime.option(name, prof.runtime.ctx) : NULL;
  return v ? v : cp_config_getenv(name);
}

/* On each of the profiler's threads, before it runs. */
static void internal_thread_begins(void) {
  cp_threads_exclude_self();
  cp_creds_thread_begin();
}

/* And as it ends: its thread id may be an application thread's next. */
static void internal_thread_ends(void) { cp_threads_forget_excluded_self(); }

/* Before the application's dlclose (interpose/loader.c). */
static void symbols_before_dlclose(void) {
  cp_thread_work_begin();
  cp_symbols_before_unload();
  cp_thread_work_end();
}

/* What reading symbols may cost (the DWARF reader's gate, dwarf.h, and the
 * symbol tables', symbols.h): debug information is read and a symbol table
 * built while what it costs, with what both spent so far, fits in
 * CONTPROF_MAX_OVERHEAD_PCT of the process's CPU so far, or when the
 * process has forked (its children inherit what it read). A process that
 * lives a few milliseconds then names its few addresses by scanning symbol
 * sections, without lines, instead of spending ten times its own CPU on
 * libc's debug file and a compiler's symbol table at exit (docs/symbols.md,
 * "Short-lived processes"). */
static int read_allowed(uint64_t estimate_ns, uint64_t spent_ns) {
  double cap = prof.cfg.max_overhead_pct;
  if (cap <= 0 || cp_fork_hints_has_forked())
    return 1;
  double allowance =
      cap / 100.0 * (double)cp_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  return (double)(spent_ns + estimate_ns) <= allowance;
}

static int dwarf_read_allowed(uint64_t estimate_ns, uint64_t spent_ns) {
  return read_allowed(estimate_ns, spent_ns + cp_symbols_spent_ns());
}

static int table_build_allowed(uint64_t estimate_ns, uint64_t spent_ns) {
  return read_allowed(estimate_ns, spent_ns + cp_dwarf_spent_ns());
}

/* Starts everything from prof.cfg (loaded). On failure prof.cfg is kept.
 * In a child of fork with the wall profile, the drain thread waits until
 * the child has lived a second (the wall timer's thread starts it): a child
 * that serves one connection and exits makes one thread, not two
 * (docs/overhead.md, "Short-lived processes"). */
static int start_configured(int forked_child) {
  int rc;
  cp_unwind_set_mode(prof.cfg.unwind_mode); /* before the samplers start */
  cp_symbols_set_names(!prof.cfg.symbolize_none);
  cp_symbols_set_budget(prof.cfg.symbols_max_bytes);
  cp_dwarf_set_budget(prof.cfg.dwarf_max_bytes);
  cp_dwarf_set_read_gate(dwarf_read_allowed);
  cp_symbols_set_build_gate(table_build_allowed);
  /* The mappings are read here, before the application's code runs: read
   * later (at the first drain), the read's descriptor met an application
   * closing and reusing descriptor numbers in the instant between our
   * identity check and close (test_unwind_descriptors under ASan,
   * docs/security.md). And again before each dlclose, so that an unloaded
   * object's samples keep its symbols. */
  cp_symbols_init();
  cp_interpose_before_dlclose(symbols_before_dlclose);
  /* Label sets take at most a quarter of CONTPROF_MAX_MEMORY_MB; from here
   * on a set no one holds waits for the samples naming it to be exported. */
  cp_labels_set_memory_limit(prof.cfg.max_memory_bytes / 4);
  cp_labels_set_profiling(1);
  cp_stats_reset();
  if (cp_stats_choose_clock() == CLOCK_MONOTONIC)
    cp_debug("timing the hooks on the monotonic clock: two reads take %lld "
             "ns, taken off each timed call",
             (long long)cp_stats_clock_pair_ns());
  /* Every thread of the profiler's own, whichever layer starts it, is
   * excluded from sampling before it runs, and follows the application's
   * capability changes (samplers/creds.h). */
  cp_creds_start();
  cp_set_internal_thread_starting(cp_creds_thread_starting);
  cp_set_internal_thread_init(internal_thread_begins, internal_thread_ends);
  unsigned native = prof.cfg.profiles & ~self_sampled_profiles();
  int defer = forked_child && (native & CP_PROFILE_WALL);
  if ((rc = cp_agg_start(&prof.cfg, tick, drained, cp_thread_name_of, defer))) {
    cp_labels_set_profiling(0);
    return rc;
  }
  /* A sample that pays for the unwinder's table wakes the drain thread,
   * which asks cp_unwind_early_due after each drain (drained). */
  cp_unwind_on_rent_paid(cp_agg_wake);

  size_t nsinks = 0;
  cp_sink **sinks = cp_sinks_create(&prof.cfg, &nsinks);
  if (!sinks) {
    cp_agg_stop();
    cp_labels_set_profiling(0);
    return CONTPROF_ERR_NOMEM;
  }
  if (gethostname(prof.host, sizeof prof.host) != 0)
    snprintf(prof.host, sizeof prof.host, "unknown");
  make_uuid(prof.runtime_id);
  atomic_store(&prof.pid, (pid_t)syscall(SYS_getpid));
  cp_export_meta meta = {
      .cfg = &prof.cfg,
      .host = prof.host,
      .pid = getpid(),
      .runtime_id = prof.runtime_id,
      .runtime = prof.has_runtime ? prof.runtime_name : "native",
      .runtime_version =
          prof.has_runtime ? prof.runtime_version : gnu_get_libc_version(),
      .cpu_period_ns = 1000000000 / prof.cfg.cpu_hz,
  };
  if ((rc = cp_scheduler_start(&prof.cfg, sinks, nsinks, &meta, before_close,
                               before_export))) {
    cp_sinks_destroy(sinks, nsinks);
    cp_agg_stop();
    cp_labels_set_profiling(0);
    return rc;
  }

  prof.nactive = 0;
  atomic_store(&prof.follow_exec, prof.cfg.follow_exec);
  cp_exec_leave_environ();
  for (size_t i = 0; i < CP_ARRAY_SIZE(all_samplers); i++) {
    const cp_sampler *s = all_samplers[i];
    if (!(native & s->profile))
      continue;
    if ((rc = s->start(&prof.cfg))) {
      cp_error("cannot start the %s sampler: %s", s->name,
               contprof_strerror(rc));
      continue;
    }
    prof.active[prof.nactive++] = s;
  }
  cp_interpose_direct_calls(prof.cfg.direct_calls);
  if (forked_child)
    cp_threads_start_forked(prof.active, prof.nactive);
  else
    cp_threads_start(prof.active, prof.nactive);
  cp_governor_start(&prof.cfg, prof.active, prof.nactive);
  /* Deferred for a wall timer that did not start: no one else would. */
  int wall_runs = 0;
  for (size_t i = 0; i < prof.nactive; i++)
    wall_runs |= prof.active[i] == &cp_wall_sampler;
  if (defer && !wall_runs)
    cp_agg_start_deferred(1);

  char profiles[64];
  if (cp_log_get_level() >= CP_LOG_INFO) { /* not formatted for nothing */
    unsigned to = prof.cfg.exports;
    cp_info("profiling %s (%s) at %d Hz, a profile every %d s%s%s%s%s",
            prof.cfg.service,
            cp_profiles_string(prof.cfg.profiles, profiles, sizeof profiles),
            prof.cfg.cpu_hz, prof.cfg.upload_period_s,
            to & CP_EXPORT_FILE ? " into " : "",
            to & CP_EXPORT_FILE ? prof.cfg.output_dir : "",
            to & CP_EXPORT_DATADOG ? ", to the Datadog agent or intake" : "",
            to & CP_EXPORT_PYROSCOPE ? ", to Pyroscope" : "");
  }
  return 0;
}

static int start_locked(const contprof_options *opts,
                        const contprof_runtime *runtime) {
  prof.has_runtime = runtime != NULL;
  if (runtime) {
    prof.runtime = *runtime;
    snprintf(prof.runtime_name, sizeof prof.runtime_name, "%s",
             runtime->name ? runtime->name : "native");
    snprintf(prof.runtime_version, sizeof prof.runtime_version, "%s",
             runtime->version ? runtime->version : "");
  }
  int rc =
      cp_config_load(&prof.cfg, opts, runtime ? runtime_option : NULL, NULL);
  if (rc == 0 && !prof.cfg.enabled) {
    if (!prof.cfg.privileged) /* config.c said why */
      cp_info("profiling disabled by CONTPROF_ENABLED");
    cp_config_free(&prof.cfg);
    rc = CONTPROF_ERR_DISABLED;
  } else if (rc == 0 && (rc = start_configured(0)) != 0) {
    cp_config_free(&prof.cfg);
  }
  if (rc)
    prof.has_runtime = 0;
  return rc;
}

static int start(const contprof_options *opts,
                 const contprof_runtime *runtime) {
  cp_alloc_guard_begin();
  pthread_mutex_lock(&prof.lock);
  int rc;
  if (!atomic_load(&prof.running) && prof.stopped_for_exec) {
    cp_config_free(&prof.cfg); /* kept for a failed exec; superseded */
    prof.stopped_for_exec = 0;
  }
  if (atomic_load(&prof.running)) {
    rc = CONTPROF_ERR_ALREADY_STARTED;
  } else if ((rc = start_locked(opts, runtime)) == 0) {
    atomic_store(&prof.running, 1);
    if (!prof.atexit_registered) {
      atexit(stop_at_exit);
      pthread_atfork(after_fork_prepare, after_fork_parent, after_fork_child);
      prof.atexit_registered = 1;
    }
  }
  pthread_mutex_unlock(&prof.lock);
  cp_alloc_guard_end();
  return rc;
}

int contprof_start(const contprof_options *opts) { return start(opts, NULL); }

int contprof_start_runtime(const contprof_options *opts,
                           const contprof_runtime *runtime) {
  if (!runtime)
    return CONTPROF_ERR_INVALID;
  return start(opts, runtime);
}

int contprof_stop(void) {
  pthread_mutex_lock(&prof.lock);
  if (!atomic_load(&prof.running)) {
    pthread_mutex_unlock(&prof.lock);
    return CONTPROF_ERR_NOT_STARTED;
  }
  cp_alloc_guard_begin();
  atomic_store(&prof.running, 0);
  teardown_locked(0);
  prof.has_runtime = 0;
  cp_alloc_guard_end();
  pthread_mutex_unlock(&prof.lock);
  return 0;
}

int contprof_flush(void) {
  pthread_mutex_lock(&prof.lock);
  int rc = atomic_load(&prof.running) ? cp_scheduler_flush()
                                      : CONTPROF_ERR_NOT_STARTED;
  pthread_mutex_unlock(&prof.lock);
  return rc;
}

int contprof_is_running(void) { return atomic_load(&prof.running); }

void contprof_own_thread_begin(void) { cp_stats_thread_begin(); }
void contprof_own_thread_end(void) { cp_stats_thread_end(); }

static void overhead_of(const cp_period_stats *s, contprof_overhead *out) {
  memset(out, 0, sizeof *out);
  out->profiler_threads_cpu_ns = s->threads_cpu_ns;
  out->profiler_hooks_ns = s->hooks_ns;
  out->profiler_cpu_ns = cp_stats_profiler_ns(s);
  out->process_cpu_ns = s->process_cpu_ns;
  out->profiler_overhead_pct = cp_stats_overhead_pct(s);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    out->samples += s->samples[k];
    out->drops += s->drops[k];
  }
  out->profiler_rss_bytes = s->memory_bytes;
}

void contprof_stats(contprof_overhead *last_period,
                    contprof_overhead *since_start) {
  cp_period_stats last, total;
  cp_stats_read(&last, &total);
  if (last_period)
    overhead_of(&last, last_period);
  if (since_start)
    overhead_of(&total, since_start);
}

_Static_assert((int)CONTPROF_PROFILE_CPU == (int)CONTPROF_KIND_CPU &&
                   (int)CONTPROF_PROFILE_WALL == (int)CONTPROF_KIND_WALL &&
                   (int)CONTPROF_PROFILE_ALLOC == (int)CONTPROF_KIND_ALLOC &&
                   (int)CONTPROF_PROFILE_HEAP == (int)CONTPROF_KIND_INUSE &&
                   (int)CONTPROF_PROFILE_LOCK == (int)CONTPROF_KIND_LOCK &&
                   (int)CONTPROF_PROFILE_TYPES == (int)CONTPROF_KIND_COUNT,
               "the public profile indexes are the sample kinds");

/* Fills what out->size has room for (at most what this version knows). */
static void detailed_of(const cp_period_stats *s,
                        contprof_detailed_stats *out) {
  contprof_detailed_stats d;
  memset(&d, 0, sizeof d);
  d.size = sizeof d;
  overhead_of(s, &d.overhead);
  d.profiler_kernel_ns = s->kernel_ns;
  d.profiler_drain_ns = s->drain_ns;
  d.max_overhead_pct = s->max_overhead_pct;
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    if (!(s->profiles & cp_kinds[k].profile))
      continue;
    int of = cp_kinds[k].sampled_as;
    d.profiles[k] =
        (contprof_profile_stats){.enabled = 1,
                                 .samples = s->samples[k],
                                 .drops = s->drops[k],
                                 .thinned = s->thinned[k],
                                 .hooks_ns = s->hook_ns[k],
                                 .kernel_ns = s->kernel_kind_ns[k],
                                 .threads_cpu_ns = s->kind_threads_cpu_ns[k],
                                 .sampling = s->rate[k],
                                 .slowdown = cp_stats_slowdown(s, of),
                                 .slowdown_max = cp_stats_slowdown_max(s, of)};
  }
  size_t size = out->size < sizeof d ? out->size : sizeof d;
  memcpy(out, &d, size);
  out->size = size;
}

int contprof_stats_detailed(contprof_detailed_stats *last_period,
                            contprof_detailed_stats *since_start) {
  /* The end of the first version's last field: the least a caller may
   * give, whatever is appended later. */
  const size_t first = offsetof(contprof_detailed_stats, profiles) +
                       sizeof last_period->profiles;
  if ((last_period && last_period->size < first) ||
      (since_start && since_start->size < first))
    return CONTPROF_ERR_INVALID;
  cp_period_stats last, total;
  cp_stats_read(&last, &total);
  if (last_period)
    detailed_of(&last, last_period);
  if (since_start)
    detailed_of(&total, since_start);
  return CONTPROF_OK;
}

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

int contprof_record(const contprof_sample *sample) {
  if (!sample || (!sample->frames && sample->nframes) ||
      (unsigned)sample->kind >= CONTPROF_KIND_COUNT)
    return CONTPROF_ERR_INVALID;
  /* A snapshot sample goes into the profile being made (also the last one,
   * at stop, when running is already 0); the others into the aggregate. */
  cp_generation *snapshot =
      sample->kind == CONTPROF_KIND_INUSE ? snapshot_gen : NULL;
  if (!snapshot && !atomic_load(&prof.running))
    return CONTPROF_ERR_NOT_STARTED;
  if (sample->kind == CONTPROF_KIND_INUSE && !snapshot)
    return CONTPROF_ERR_INVALID;
  cp_sample_key key = {.tid = sample->tid ? sample->tid : cp_gettid()};
  if (sample->labels == CONTPROF_LABELS_OF_CALLER) {
    key.labels = cp_labels_current();
    cp_trace_current(&key.span_id, &key.local_root_span_id);
  } else {
    key.labels = sample->labels;
    key.span_id = sample->span_id;
    key.local_root_span_id = sample->local_root_span_id;
  }
  cp_alloc_guard_begin(); /* the aggregate's growth is not the caller's */
  int rc = 0;
  if (snapshot)
    cp_gen_add(snapshot, sample->frames, sample->nframes, 0, &key, sample->kind,
               sample->count, sample->quantity);
  else
    rc = cp_agg_record(sample->frames, sample->nframes, &key, sample->kind,
                       sample->count, sample->quantity);
  cp_alloc_guard_end();
  return rc;
}

int contprof_native_signal_install(int preferred,
                                   void (*handler)(int, siginfo_t *, void *)) {
  int sig = cp_signal_install(preferred, handler);
  if (sig <= 0)
    return -1;
  cp_unwind_init();
  return sig;
}

/* Async-signal-safe. */
CP_PASSTHROUGH void contprof_native_signal_chain(int sig, siginfo_t *info,
                                                 void *ucontext) {
  cp_signal_chain(sig, info, ucontext);
}

_Static_assert(CONTPROF_NATIVE_UNWIND_SLACK >= CP_UNWIND_SLACK,
               "runtime.h promises the room cp_unwind_signal needs");

/* Async-signal-safe, bounded, no locks (see runtime.h). */
long contprof_native_unwind_signal(void *ucontext, uint64_t *frames,
                                   size_t max_frames, int *truncated) {
  if (cp_thread.in_handler)
    return -1;
  cp_thread.in_handler = 1;
  size_t n = cp_unwind_signal(ucontext, frames, max_frames, 1, truncated);
  cp_thread.in_handler = 0;
  return (long)n;
}

int contprof_record_sample(const uint64_t *frames, size_t nframes, pid_t tid,
                           uint32_t labels, contprof_sample_kind kind,
                           int64_t count, int64_t quantity) {
  contprof_sample s = {.frames = frames,
                       .nframes = nframes,
                       .tid = tid,
                       .labels = labels,
                       .kind = kind,
                       .count = count,
                       .quantity = quantity};
  return contprof_record(&s);
}

int contprof_set_thread_name(pid_t tid, const char *name) {
  if (!tid)
    tid = cp_gettid();
  int rc = cp_thread_names_set(tid, name);
  if (rc == 0 && name)
    cp_agg_thread_renamed(tid);
  return rc;
}

int contprof_runtime_settings_get(contprof_runtime_settings *out) {
  if (!out)
    return CONTPROF_ERR_INVALID;
  pthread_mutex_lock(&prof.lock);
  int rc = CONTPROF_ERR_NOT_STARTED;
  if (atomic_load(&prof.running)) {
    out->profiles = 0;
    for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
      if (prof.cfg.profiles & cp_kinds[k].profile)
        out->profiles |= CONTPROF_SELF(k);
    out->cpu_hz = prof.cfg.cpu_hz;
    out->max_frames = prof.cfg.max_frames;
    out->wall_interval_ms = prof.cfg.wall_interval_ms;
    out->alloc_sample_bytes = prof.cfg.alloc_sample_bytes;
    rc = 0;
  }
  pthread_mutex_unlock(&prof.lock);
  return rc;
}

/* --- exec (exec.c) --------------------------------------------------------
 */

int cp_profiler_follow_exec(void) { return atomic_load(&prof.follow_exec); }

int cp_profiler_before_exec(void) {
  if (!atomic_load(&prof.running))
    return 0;
  /* A vfork child shares our memory and must leave the profiler alone (it
   * has no timers; nothing of ours is pending for it): stopping would stop
   * the parent's. Its pid tells it apart, not the parent thread's cached
   * tid, which it shares: with that cache still empty, the child filled it
   * with its own tid, passed the test and stopped the parent's profiler,
   * whose profile was then lost (test_vfork_exec under load). */
  if ((pid_t)syscall(SYS_getpid) != atomic_load(&prof.pid))
    return 0;
  pthread_mutex_lock(&prof.lock);
  int stopped = 0;
  if (atomic_load(&prof.running)) {
    cp_alloc_guard_begin();
    atomic_store(&prof.running, 0);
    teardown_locked(1);
    prof.stopped_for_exec = stopped = 1;
    cp_alloc_guard_end();
  }
  pthread_mutex_unlock(&prof.lock);
  cp_signals_discard_pending();
  return stopped;
}

int cp_profiler_before_exit(const void *caller_frame) {
  pid_t pid = (pid_t)syscall(SYS_getpid);
  if (pid != atomic_load(&prof.pid))
    return 0; /* not started here, or a vfork child: not ours to touch */
  if (cp_signals_maybe_in_handler(caller_frame))
    return 0; /* no stop, no dlsym: the profile is lost, as without the hook */
  /* Once: a second _exit (another thread's, or one from the stop) goes
   * straight on. */
  static _Atomic pid_t exiting;
  if (atomic_load(&prof.running) && atomic_exchange(&exiting, pid) != pid) {
    cp_debug("pid %d ends with _exit: the last profile first", (int)pid);
    contprof_stop();
  }
  return 1;
}

void cp_profiler_exec_failed(void) {
  pthread_mutex_lock(&prof.lock);
  if (prof.stopped_for_exec && !atomic_load(&prof.running)) {
    prof.stopped_for_exec = 0;
    restart_kept_config(0);
  }
  pthread_mutex_unlock(&prof.lock);
}
