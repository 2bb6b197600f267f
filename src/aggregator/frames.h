/* Runtime frames (function, file, line) interned into frame words carrying
 * CONTPROF_FRAME_RUNTIME, plus the synthetic frames the profiler itself adds.
 * The table is process-wide and append-only, so a frame word stays valid. */
#ifndef CP_FRAMES_H
#define CP_FRAMES_H

#include <stdint.h>

#include "contprof/runtime.h"

typedef struct cp_runtime_frame {
  const char *function;
  const char *file;
  int64_t line;
} cp_runtime_frame;

static inline int cp_frame_is_runtime(uint64_t word) {
  return (word & CONTPROF_FRAME_RUNTIME) != 0;
}

/* Looks up a runtime frame word; NULL if unknown. Thread-safe. */
const cp_runtime_frame *cp_frame_runtime_get(uint64_t word);

/* Frame words of the synthetic frames "[truncated]", "[overflow]" and
 * "[dropped]". */
uint64_t cp_frame_truncated(void);
uint64_t cp_frame_overflow(void);
uint64_t cp_frame_dropped(void);

#endif
