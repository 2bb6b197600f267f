/* The interposition layer's interface without the hooks, for programs that
 * carry the profiler's code but must not replace any libc function: the
 * `contprof` command (tools/). Its own lock calls (own_locks.h) go straight
 * to the C library, sigaction is the C library's, and the samplers that
 * ask whether a hook sees every call hear "no". Linked instead of the
 * hook objects, never with them. */

/* This file defines the cp_lock_real_* functions: undo own_locks.h. */
#include "interpose/own_locks_undo.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "interpose/real.h"

int cp_lock_real_mutex_lock(pthread_mutex_t *l) {
  return pthread_mutex_lock(l);
}
int cp_lock_real_mutex_timedlock(pthread_mutex_t *l,
                                 const struct timespec *abstime) {
  return pthread_mutex_timedlock(l, abstime);
}
int cp_lock_real_mutex_clocklock(pthread_mutex_t *l, clockid_t clock,
                                 const struct timespec *abstime) {
  return pthread_mutex_clocklock(l, clock, abstime);
}
int cp_lock_real_rwlock_rdlock(pthread_rwlock_t *l) {
  return pthread_rwlock_rdlock(l);
}
int cp_lock_real_rwlock_wrlock(pthread_rwlock_t *l) {
  return pthread_rwlock_wrlock(l);
}
int cp_lock_real_rwlock_timedrdlock(pthread_rwlock_t *l,
                                    const struct timespec *abstime) {
  return pthread_rwlock_timedrdlock(l, abstime);
}
int cp_lock_real_rwlock_timedwrlock(pthread_rwlock_t *l,
                                    const struct timespec *abstime) {
  return pthread_rwlock_timedwrlock(l, abstime);
}
int cp_lock_real_rwlock_clockrdlock(pthread_rwlock_t *l, clockid_t clock,
                                    const struct timespec *abstime) {
  return pthread_rwlock_clockrdlock(l, clock, abstime);
}
int cp_lock_real_rwlock_clockwrlock(pthread_rwlock_t *l, clockid_t clock,
                                    const struct timespec *abstime) {
  return pthread_rwlock_clockwrlock(l, clock, abstime);
}

int cp_real_sigaction(int sig, const struct sigaction *act,
                      struct sigaction *old) {
  return sigaction(sig, act, old);
}

/* No malloc hook: the allocation sampler must not expect any call. */
int cp_interpose_malloc_resolve(void) { return 1; }
int cp_interpose_malloc_boot_block(const void *p) {
  (void)p;
  return 0;
}
void cp_interpose_locks_resolve(void) {}
void cp_interpose_loader_resolve(void) {}
void cp_interpose_before_dlclose(void (*fn)(void)) { (void)fn; }
int cp_interpose_sees_dlclose(void) { return 0; }
int cp_interpose_sees_sigaltstack(void) { return 0; }
int cp_interpose_sees_sigaction(void) { return 0; }
void cp_interpose_after_fork_child(void) {}
void cp_interpose_direct_calls(int allowed) { (void)allowed; }
void cp_interpose_threads_listed(size_t listed) { (void)listed; }
