/* contprof: interface for language bindings (Python, Ruby) that sample their
 * runtime's own frames and hand them to the shared aggregator.
 *
 * A frame is a 64-bit word: either a native program counter or, with the
 * CONTPROF_FRAME_RUNTIME bit set, a runtime frame interned with
 * contprof_frame_intern (function, file, line). Both kinds may be mixed in one
 * stack, which is given leaf first. */
#ifndef CONTPROF_RUNTIME_H
#define CONTPROF_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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

#define CONTPROF_LABELS_OF_CALLER UINT32_MAX

/* Records one sample of `kind` with `count` and `quantity` (for example 1 and
 * 10000000 ns) for thread `tid` (0 = the calling thread) with label set
 * `labels` (CONTPROF_LABELS_OF_CALLER = the calling thread's). Not
 * async-signal-safe; returns CONTPROF_ERR_NOT_STARTED when the profiler is
 * not running. */
int contprof_record_sample(const uint64_t *frames, size_t nframes, pid_t tid,
                           uint32_t labels, contprof_sample_kind kind,
                           int64_t count, int64_t quantity);

#ifdef __cplusplus
}
#endif
#endif
