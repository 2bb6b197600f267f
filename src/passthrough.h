/* Functions of ours that stand between two of the application's frames:
 * every function of the files of src/interpose whose hooks call the C
 * library's function they replace, their helpers with them (a CPU sample in
 * the kernel under a multi-threaded program's `read` or `recv` found our
 * hook between the application's caller and the C library's function), the
 * pthread_create hook's trampoline (between start_thread and the thread's
 * routine, at the root of every thread the application makes), the wrapper
 * that counts the application's signal handlers, and our sampling handlers
 * that chain to the application's. Without the profiler the application's
 * frames would be adjacent, so a profile leaves these out of its stacks
 * (cp_gen_add) (docs/symbols.md, "Frames of ours between the
 * application's").
 *
 * They are placed in a section of their own, whose bounds the linker gives
 * (__start_ and __stop_ of its name): a frame whose return address is in it
 * is one of theirs. A leaf frame there (a sample of their own code: a
 * system call a hook makes itself, its own instructions) is kept: that is
 * where the thread is, and what the hook does is shown under its name. */
#ifndef CP_PASSTHROUGH_H
#define CP_PASSTHROUGH_H

#include <stdint.h>

#define CP_PASSTHROUGH __attribute__((section("cp_passthrough_text")))

extern const char __start_cp_passthrough_text[] __attribute__((weak));
extern const char __stop_cp_passthrough_text[] __attribute__((weak));

/* 1 when ra, a caller's return address (the instruction after its call), is
 * in one of those functions. Async-signal-safe. */
static inline int cp_passthrough_holds(uint64_t ra) {
  uint64_t start = (uint64_t)(uintptr_t)__start_cp_passthrough_text;
  uint64_t stop = (uint64_t)(uintptr_t)__stop_cp_passthrough_text;
  return start && ra > start && ra <= stop;
}

#endif
