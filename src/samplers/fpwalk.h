/* The frame-pointer walker (fpwalk.c): stacks from saved rbp chains where
 * the code keeps them, from the objects' .eh_frame rules for the frames
 * where it does not, never reading outside the thread's stack. */
#ifndef CP_FPWALK_H
#define CP_FPWALK_H

#include <stddef.h>
#include <stdint.h>

/* CONTPROF_UNWIND (docs/configuration.md). */
typedef enum cp_unwind_mode {
  CP_UNWIND_AUTO = 0, /* the walker where it is sure, libunwind otherwise */
  CP_UNWIND_FP = 1,   /* rbp chains only, whatever the code */
  CP_UNWIND_DWARF = 2 /* libunwind only */
} cp_unwind_mode;

/* Registers an unwind starts from. */
typedef struct cp_fp_regs {
  uintptr_t pc; /* exact pc of the first frame (not a return address) */
  uintptr_t sp;
  uintptr_t bp;
} cp_fp_regs;

/* Builds the table of loaded objects and their frame-pointer verdicts (once;
 * later calls do nothing). Not signal-safe: dl_iterate_phdr, mmap. */
void cp_fpwalk_init(void);

/* Asks the next cp_fpwalk_refresh to build the table, so that a process
 * pays for it (3 ms of CPU for a small program here: every function of every
 * loaded object classified) only once it has lived to the profiler's first
 * tick, and on the scheduler's thread. Until then `auto` hands every sample
 * to libunwind (docs/signals.md, "Frame pointers"). */
void cp_fpwalk_init_later(void);

/* Builds the table if cp_fpwalk_init_later asked for it and it is not built
 * yet; rebuilds it if objects were loaded or unloaded since it was built.
 * The profiler's thread, about once a second. Not signal-safe. */
void cp_fpwalk_refresh(void);

/* Whether cp_fpwalk_refresh has a table to build: one is wanted and not
 * built, or objects were loaded or unloaded since. One step of
 * dl_iterate_phdr. Not signal-safe. */
int cp_fpwalk_refresh_due(void);

/* Whether the table is wanted (cp_fpwalk_init_later) but not built yet:
 * every walk of `auto` falls back to libunwind meanwhile. Async-signal-safe
 * (two atomic loads). */
int cp_fpwalk_table_pending(void);

/* In the child of fork: the build lock and the count of walks in progress
 * start afresh. */
void cp_fpwalk_after_fork_child(void);

/* Called by the dlclose hook (interpose/loader.c) before and after the
 * real dlclose: the table of objects is stale from then on. Async-signal-
 * safe: one atomic add. */
void cp_fpwalk_on_dlclose(void);

/* The calling thread's stack, [lo, hi), for the walker's bounds; called by
 * the pthread_create hook on the new thread (pthread_getattr_np: allocates).
 * Not signal-safe. */
void cp_fpwalk_thread_start(void);

/* The same for the main thread (from /proc/self/maps), when called on it
 * and not known yet. At start, in every unwind mode. Not signal-safe. */
void cp_fpwalk_main_thread_start(void);

/* The calling thread's stack as recorded at its start: 1 with [*lo, *hi),
 * or 0 when unknown (a thread that began before the profiler, or whose
 * bounds could not be read). Async-signal-safe: two thread-local loads. */
int cp_fpwalk_stack_bounds(uintptr_t *lo, uintptr_t *hi);

/* Walks the stack from `r`. alt_lo/alt_hi: the thread's alternate signal
 * stack (empty if none). mode CP_UNWIND_AUTO: returns 0 when any frame
 * cannot be walked with certainty (the caller then unwinds with libunwind);
 * CP_UNWIND_FP: follows rbp from the first frame, stopping (not failing) at
 * the first frame pointer out of bounds. first_is_exact: r->pc is an
 * interrupted pc (1) or a return address (0, looked up at pc - 1). Frames
 * are stored leaf first as cp_unwind_signal stores them; *truncated set when
 * the stack was deeper than max_frames. Async-signal-safe, bounded, no
 * locks; reads only the stack within bounds and the mapped .eh_frame of
 * objects the table knows. */
size_t cp_fpwalk(const cp_fp_regs *r, uintptr_t alt_lo, uintptr_t alt_hi,
                 cp_unwind_mode mode, int first_is_exact, uint64_t *frames,
                 size_t max_frames, int *truncated);

/* cp_fpwalk from an interrupted pc, also storing in slots[i] the address
 * each frame's pc was read from (0 for the first): where a wait hook's
 * parked stack is checked against the live stack (samplers/wall.c). */
size_t cp_fpwalk_slots(const cp_fp_regs *r, uintptr_t alt_lo, uintptr_t alt_hi,
                       cp_unwind_mode mode, uint64_t *frames, uint64_t *slots,
                       size_t max_frames, int *truncated);

/* Counters, for the benchmark and the debug log: walks handed to
 * libunwind, and the objects judged built with frame pointers. */
typedef struct cp_fpwalk_stats {
  uint64_t fell_back;
  size_t objects, fp_objects;
} cp_fpwalk_stats;
void cp_fpwalk_stats_get(cp_fpwalk_stats *out);

/* The verdict for the object holding addr: 1 built with frame pointers, 0
 * not, -1 unknown (for the test). */
int cp_fpwalk_object_has_fp(uintptr_t addr);
/* The same for the code at addr: in a function that makes an rbp frame,
 * past the point where it is made. */
int cp_fpwalk_function_has_fp(uintptr_t addr);

#endif
