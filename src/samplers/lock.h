/* What the rest of the profiler needs from the lock sampler (lock.c). */
#ifndef CP_LOCK_H
#define CP_LOCK_H

/* Marks the calling thread as the profiler's own: its lock waits are never
 * recorded (libraries the profiler calls there, such as libcurl, take locks
 * through the hooks). */
void cp_lock_exclude_thread(void);

#endif
