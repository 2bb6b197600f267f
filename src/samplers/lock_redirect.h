/* Force-included into every profiler source file (CMakeLists.txt passes
 * -include for contprof_objects): the profiler's own lock calls go straight
 * to the C library, past the lock sampler's hooks (lock.c), so the profiler's
 * locks are never profiled and a hook never runs inside the profiler. pthread.h
 * then declares the cp_lock_real_* functions with the same prototypes; lock.c
 * defines them and undoes these macros. Code outside libcontprof (the
 * application, its libraries) still reaches the hooks. */
#ifndef CP_LOCK_REDIRECT_H
#define CP_LOCK_REDIRECT_H

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
