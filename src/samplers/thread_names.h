/* Thread names for the profiles' `thread name` label, next to the thread
 * registry (threads.h): a name a binding gave (contprof_set_thread_name)
 * wins over the kernel's. The aggregator reads them through a callback the
 * core registers (cp_agg_start), so it needs no samplers header. */
#ifndef CP_THREAD_NAMES_H
#define CP_THREAD_NAMES_H

#include <stddef.h>
#include <sys/types.h>

/* Gives thread tid a name that wins over its kernel name (NULL forgets it).
 * Returns 0, CONTPROF_ERR_INVALID or CONTPROF_ERR_LABELS_FULL. Thread-safe. */
int cp_thread_names_set(pid_t tid, const char *name);

/* Thread tid's given name, else its kernel name (/proc/self/task/TID/comm),
 * else "", into buf. Thread-safe; not async-signal-safe. */
void cp_thread_name_of(pid_t tid, char *buf, size_t len);

/* In the child of fork: the parent's threads are gone. */
void cp_thread_names_after_fork_child(void);

#endif
