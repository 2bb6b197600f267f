/* System calls made directly for an application of one thread.
 *
 * glibc makes a descriptor call that is a cancellation point (read, write,
 * recv, send, accept, connect, poll, epoll_wait...) in one of two ways: in a
 * process of one thread, the bare system call; in any other, between
 * __pthread_enable_asynccancel and __pthread_disable_asynccancel, two
 * compare-and-swaps on the thread's cancellation word so that a
 * pthread_cancel from another thread can end the call while it blocks. A
 * process is of one thread for glibc until its second thread is made, and
 * the profiler's threads count: an nginx worker or a PostgreSQL backend
 * with the profiler pays the bookkeeping at every call, about 38 ns here
 * (docs/overhead.md, "One thread's system calls").
 *
 * The bookkeeping serves a canceller. While the application has one thread
 * and has never called pthread_cancel (nor made a C11 thread), no one can
 * cancel it (the profiler's threads never do), so the hooks of those calls
 * make the system call themselves, as glibc does for a process of one
 * thread, with the same system call and arguments. They do it only when
 * the function they stand in front of is the C library's (another
 * interposer behind ours still gets every call) and only while the flag
 * cp_direct_calls says so (interpose/thread_calls.c keeps it). */
#ifndef CP_INTERPOSE_DIRECT_H
#define CP_INTERPOSE_DIRECT_H

#include <errno.h>
#include <stdatomic.h>

/* 1 while the application's calls may skip the bookkeeping: the profiler
 * allows it (CONTPROF_DIRECT_CALLS), the application has one thread (the
 * pthread_create hook's count and the thread registry's, which also holds
 * the threads its scans of /proc/self/task found, are both 1) and it never
 * called pthread_cancel or thrd_create. Written by thread_calls.c under its
 * lock, only when it changes; read at every call of every thread, so on a
 * cache line of its own (the lock and the thread count beside it are
 * written at every thread's start and end). */
typedef struct cp_direct_flag {
  _Alignas(64) _Atomic int on;
  char pad[64 - sizeof(int)];
} cp_direct_flag;
extern cp_direct_flag cp_direct_calls;

/* Whether fn, a hook's real function, is the C library's: once per hook,
 * kept in *state (-1: not asked yet). Not async-signal-safe the first time
 * (_dl_find_object, else dladdr). In real.c. */
int cp_direct_is_libc(_Atomic signed char *state, void *fn);

/* cp_direct_is_libc, its answer inline once known. Async-signal-safe
 * then. */
static inline int cp_direct_libc(_Atomic signed char *state, void *fn) {
  signed char s = atomic_load_explicit(state, memory_order_relaxed);
  return s >= 0 ? s : cp_direct_is_libc(state, fn);
}

/* In a hook after CP_REAL(name): whether this call may be made directly.
 * One relaxed load when not. */
#define CP_DIRECT(name)                                                        \
  (atomic_load_explicit(&cp_direct_calls.on, memory_order_relaxed) &&          \
   cp_direct_libc(&direct_##name, (void *)fn_##name))
#define CP_DIRECT_STATE(name) static _Atomic signed char direct_##name = -1

#if defined(__x86_64__)
/* The system call nr with six arguments, as glibc's wrappers make it for a
 * process of one thread: -1 and errno on error, like them. Async-signal-
 * safe. A macro, not an inline function: the time a profile finds in the
 * system call is then the hook's (`writev`), where an inlined function
 * was a frame of its own under it, and the leaf of most of an nginx
 * worker's samples was `cp_direct_syscall` (docs/overhead.md, "One
 * thread's system calls"). The arguments are evaluated before the
 * registers are loaded. */
#define cp_direct_syscall(nr, a, b, c, d, e, f)                                \
  __extension__({                                                              \
    long cp_args_[7] = {(long)(nr), (long)(a), (long)(b), (long)(c),           \
                        (long)(d),  (long)(e), (long)(f)};                     \
    long cp_rc_;                                                               \
    register long cp_r10_ __asm__("r10") = cp_args_[4];                        \
    register long cp_r8_ __asm__("r8") = cp_args_[5];                          \
    register long cp_r9_ __asm__("r9") = cp_args_[6];                          \
    __asm__ volatile("syscall"                                                 \
                     : "=a"(cp_rc_)                                            \
                     : "0"(cp_args_[0]), "D"(cp_args_[1]), "S"(cp_args_[2]),   \
                       "d"(cp_args_[3]), "r"(cp_r10_), "r"(cp_r8_),            \
                       "r"(cp_r9_)                                             \
                     : "rcx", "r11", "memory");                                \
    if (cp_rc_ < 0 && cp_rc_ > -4096) {                                        \
      errno = (int)-cp_rc_;                                                    \
      cp_rc_ = -1;                                                             \
    }                                                                          \
    cp_rc_;                                                                    \
  })
#define CP_DIRECT_SUPPORTED 1
#else
/* Elsewhere the calls go to the C library's functions. */
#define CP_DIRECT_SUPPORTED 0
static inline long cp_direct_syscall(long nr, long a, long b, long c, long d,
                                     long e, long f) {
  (void)nr, (void)a, (void)b, (void)c, (void)d, (void)e, (void)f;
  errno = ENOSYS;
  return -1;
}
#endif

/* The call `direct` (a cp_direct_syscall) when `ok` and CP_DIRECT(name),
 * else `libc` (the real function): the value of a hook's call. `ok` is a
 * condition of the call's own (a fortified call's check, which the C
 * library's function reports). */
#define CP_DIRECT_OR_WHEN(ok, name, direct, libc)                              \
  ((ok) && CP_DIRECT_SUPPORTED && CP_DIRECT(name) ? (__typeof__(libc))(direct) \
                                                  : (libc))
#define CP_DIRECT_OR(name, direct, libc)                                       \
  CP_DIRECT_OR_WHEN(1, name, direct, libc)

#endif
