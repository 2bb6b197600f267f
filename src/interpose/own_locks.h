/* The profiler's own lock calls bypass the lock hooks. Owned by the
 * interposition layer; force-included into every source file built into the
 * profiler (CMakeLists.txt passes -include for contprof's object
 * libraries), so that no layer has to remember it: the profiler's locks are
 * never profiled and its lock calls never re-enter a hook. pthread.h then
 * declares the cp_lock_real_* functions with the same prototypes;
 * interpose/locks.c defines them (the C library's call, looked up once) and
 * undoes these macros for the hooks themselves. Code outside libcontprof
 * (the application, its libraries) still reaches the hooks. */
#ifndef CP_INTERPOSE_OWN_LOCKS_H
#define CP_INTERPOSE_OWN_LOCKS_H

#define pthread_mutex_lock cp_lock_real_mutex_lock
#define pthread_mutex_timedlock cp_lock_real_mutex_timedlock
#define pthread_mutex_clocklock cp_lock_real_mutex_clocklock
#define pthread_rwlock_rdlock cp_lock_real_rwlock_rdlock
#define pthread_rwlock_wrlock cp_lock_real_rwlock_wrlock
#define pthread_rwlock_timedrdlock cp_lock_real_rwlock_timedrdlock
#define pthread_rwlock_timedwrlock cp_lock_real_rwlock_timedwrlock
#define pthread_rwlock_clockrdlock cp_lock_real_rwlock_clockrdlock
#define pthread_rwlock_clockwrlock cp_lock_real_rwlock_clockwrlock

#endif
