/* contprof: interface for language bindings (Python, Ruby) that sample their
 * runtime's own frames and hand them to the shared aggregator.
 *
 * A frame is a 64-bit word: either a native program counter or, with the
 * CONTPROF_FRAME_RUNTIME bit set, a runtime frame interned with
 * contprof_frame_intern (function, file, line). Both kinds may be mixed in one
 * stack, which is given leaf first. */
#ifndef CONTPROF_RUNTIME_H
#define CONTPROF_RUNTIME_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "contprof/profiler.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CONTPROF_FRAME_RUNTIME (1ULL << 63)

/* What a sample measures; each kind carries a count and a quantity. */
typedef enum contprof_sample_kind {
  CONTPROF_KIND_CPU = 0,   /* cpu-samples/count, cpu-time/nanoseconds */
  CONTPROF_KIND_WALL = 1,  /* wall-samples/count, wall-time/nanoseconds */
  CONTPROF_KIND_ALLOC = 2, /* alloc-samples/count, alloc-space/bytes */
  CONTPROF_KIND_INUSE = 3, /* inuse-objects/count, inuse-space/bytes */
  CONTPROF_KIND_LOCK = 4,  /* lock-acquire/count, lock-acquire-wait/ns */
  CONTPROF_KIND_COUNT = 5
} contprof_sample_kind;

/* Interns a runtime frame and returns its frame word (never 0). Strings are
 * copied. Not async-signal-safe. Returns 0 when the frame table is full. */
uint64_t contprof_frame_intern(const char *function, const char *file,
                               int64_t line);

/* The calling thread's current label set, as an opaque id. A binding that
 * samples other threads reads it on each thread (cheaply, any time, also from
 * a signal handler) and passes it to contprof_record_sample. */
uint32_t contprof_labels_current(void);

/* A label set no one holds is freed two profiles after its last use (see
 * docs/security.md), and its id then reads as no labels. A binding that keeps
 * an id longer than the thread's scope (a live heap sample) holds the set:
 * contprof_labels_hold returns the id (0 when it no longer names a set: use
 * 0 then), and each hold is given back once with contprof_labels_release.
 * Both are async-signal-safe and lock-free. */
uint32_t contprof_labels_hold(uint32_t labels);
void contprof_labels_release(uint32_t labels);

#define CONTPROF_LABELS_OF_CALLER UINT32_MAX

/* Records one sample of `kind` with `count` and `quantity` (for example 1 and
 * 10000000 ns) for thread `tid` (0 = the calling thread) with label set
 * `labels` (CONTPROF_LABELS_OF_CALLER = the calling thread's). Not
 * async-signal-safe; returns CONTPROF_ERR_NOT_STARTED when the profiler is
 * not running. */
int contprof_record_sample(const uint64_t *frames, size_t nframes, pid_t tid,
                           uint32_t labels, contprof_sample_kind kind,
                           int64_t count, int64_t quantity);

/* One sample for contprof_record. */
typedef struct contprof_sample {
  const uint64_t *frames; /* leaf first */
  size_t nframes;
  pid_t tid;        /* the thread it was taken on; 0 = the calling thread */
  uint32_t labels;  /* label set (contprof_labels_current on that thread), or
                     * CONTPROF_LABELS_OF_CALLER: the calling thread's labels
                     * and span ids, and the two fields below are ignored */
  uint64_t span_id; /* contprof_set_span's ids of that thread, 0 if none */
  uint64_t local_root_span_id;
  contprof_sample_kind kind;
  int64_t count;
  int64_t quantity;
} contprof_sample;

/* Records one sample; the general form of contprof_record_sample, for a
 * binding that samples other threads and keeps their span ids itself. Not
 * async-signal-safe. A CONTPROF_KIND_INUSE sample is a snapshot: it may only
 * be recorded from the runtime's before_export callback (CONTPROF_ERR_INVALID
 * elsewhere) and goes into the profile being made. */
int contprof_record(const contprof_sample *sample);

/* A language runtime that samples its own frames. */
typedef struct contprof_runtime {
  const char *name;    /* "cpython", "ruby": the runtime, language and family
                        * in the metadata */
  const char *version; /* the runtime's version, "3.11.2" */
  /* Kinds the binding samples itself, as CONTPROF_SELF(kind) bits: the
   * native sampler of such a kind is not started (no signals, no hooks), but
   * its sample types are in the profile when the profile is enabled. */
  unsigned self_sampled;
  /* Option lookup by environment-variable name (CONTPROF_CPU_HZ, DD_ENV...):
   * the binding's own value, or NULL to read the environment. May be NULL. */
  const char *(*option)(const char *name, void *ctx);
  /* Called on the uploader thread before each profile is made (and before
   * the last one at stop); CONTPROF_KIND_INUSE samples recorded here are the
   * live-heap snapshot. Must not call start, stop or flush. May be NULL. */
  void (*before_export)(void *ctx);
  void *ctx; /* passed to option and before_export */
} contprof_runtime;

#define CONTPROF_SELF(kind) (1u << (kind))

/* contprof_start for a binding. The struct is copied; its strings and
 * callbacks must stay valid until contprof_stop. In the child of fork the
 * profiler restarts itself (new pid and runtime-id, empty profile); the
 * binding restarts its own sampling threads (os.register_at_fork,
 * Process._fork). */
int contprof_start_runtime(const contprof_options *opts,
                           const contprof_runtime *runtime);

/* Names a thread in the profile (`thread name`) instead of its kernel name
 * (/proc/self/task/TID/comm): Python's threading names, Ruby's Thread#name.
 * A NULL name forgets it. Thread-safe, not async-signal-safe. */
int contprof_set_thread_name(pid_t tid, const char *name);

/* The running profiler's settings that a binding's own samplers follow, as
 * loaded by contprof_start_runtime (its options, the environment, defaults).
 * profiles: CONTPROF_SELF(kind) bits of the enabled kinds (heap = INUSE).
 * Returns CONTPROF_ERR_NOT_STARTED when the profiler is not running. */
typedef struct contprof_runtime_settings {
  unsigned profiles;
  int cpu_hz;              /* CONTPROF_CPU_HZ */
  int max_frames;          /* CONTPROF_MAX_FRAMES */
  int wall_interval_ms;    /* CONTPROF_WALL_INTERVAL_MS */
  long alloc_sample_bytes; /* CONTPROF_ALLOC_SAMPLE_BYTES */
} contprof_runtime_settings;
int contprof_runtime_settings_get(contprof_runtime_settings *out);

/* The calling thread is one of the binding's own (a sampler thread): from
 * begin to end, its CPU time counts as the profiler's in each profile's
 * profiler_threads_cpu_ns (docs/overhead.md). Call begin first thing in the
 * thread and end before it returns. Not async-signal-safe. */
void contprof_own_thread_begin(void);
void contprof_own_thread_end(void);

/* Native stacks for a binding that reads its runtime's frames inside a
 * signal handler on the sampled thread (the Python binding's mixed stacks,
 * docs/python.md), through the profiler's own signal and unwinding code. */

/* Installs handler for a free real-time signal (preferred if free) for the
 * life of the process, and readies the native unwinder. Returns the signal,
 * or -1 when none is free. The application's own disposition of that signal
 * is kept: a signal the handler does not recognise as its request goes to
 * contprof_native_signal_chain. Not async-signal-safe. */
int contprof_native_signal_install(int preferred,
                                   void (*handler)(int, siginfo_t *, void *));

/* Calls the disposition the signal had before contprof_native_signal_install.
 * Async-signal-safe. */
void contprof_native_signal_chain(int sig, siginfo_t *info, void *ucontext);

/* In that handler: the interrupted thread's native frames (program
 * counters, leaf first, the handler's own frames left out) into frames,
 * up to max_frames; *truncated is set when the stack was deeper. frames
 * must have room for max_frames + CONTPROF_NATIVE_UNWIND_SLACK words (the
 * handler's own frames are captured, then dropped). Returns
 * the count, or -1 when another of the profiler's handlers is unwinding on
 * this thread (the unwinder's per-thread cache is not re-entrant: the
 * sample is given up). Async-signal-safe, bounded, no locks. */
#define CONTPROF_NATIVE_UNWIND_SLACK 16
long contprof_native_unwind_signal(void *ucontext, uint64_t *frames,
                                   size_t max_frames, int *truncated);

#ifdef __cplusplus
}
#endif
#endif
