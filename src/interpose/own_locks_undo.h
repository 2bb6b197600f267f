/* Undoes own_locks.h for the two files that define the names it redirects
 * (interpose/locks.c: the hooks and cp_lock_real_*; interpose/none.c: the
 * cp_lock_real_* of the build without hooks). Include it before any system
 * header, so that pthread.h declares the real names. No include guard: it
 * only undefines. */
#undef pthread_mutex_lock
#undef pthread_mutex_timedlock
#undef pthread_mutex_clocklock
#undef pthread_rwlock_rdlock
#undef pthread_rwlock_wrlock
#undef pthread_rwlock_timedrdlock
#undef pthread_rwlock_timedwrlock
#undef pthread_rwlock_clockrdlock
#undef pthread_rwlock_clockwrlock
