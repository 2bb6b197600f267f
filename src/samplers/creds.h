/* The profiler's threads follow the application's per-thread credential
 * changes (docs/security.md, "Changing credentials").
 *
 * Capabilities, the keep-capabilities flag and the securebits belong to each
 * thread, and the kernel changes them only on the thread that asks. glibc
 * applies setuid, setgid, setresuid, setgroups and the rest to every thread
 * of the process (a signal to each), and aborts the process when they do not
 * all succeed. A program that sets PR_SET_KEEPCAPS, switches to another
 * user, raises CAP_SETGID again with capset, and then sets its groups (what
 * `setpriv --reuid` does) therefore aborted once our threads were in it:
 * they had lost every capability at the switch and failed the setresgid.
 * The interposed capset and prctl (interpose/cred_calls.c) call
 * cp_creds_on_capset / cp_creds_on_prctl after the application's call
 * succeeded, and each of
 * the profiler's threads makes the same change on itself, before the
 * application goes on; our threads then hold exactly what the application's
 * thread holds, never more. */
#ifndef CP_SAMPLERS_CREDS_H
#define CP_SAMPLERS_CREDS_H

#include <linux/capability.h>

/* Takes the signal our threads are asked with. At start, before the
 * profiler's threads. Returns 0, or -1 (no free signal: changes are not
 * followed, with one message). */
int cp_creds_start(void);

/* On each of the profiler's threads as it starts (marked internal already):
 * it will follow the application's changes. */
void cp_creds_thread_begin(void);

/* cp_set_internal_thread_starting's callback: +1 before one of the
 * profiler's threads is made (returns whether it is counted: 0 when changes
 * are not followed), -1 once it registered or was not made. A change waits
 * for the counted threads to register. */
int cp_creds_thread_starting(int delta);

/* The application's thread made one of the changes that are per thread:
 * prctl(option, a2, a3) for PR_SET_KEEPCAPS, PR_SET_SECUREBITS,
 * PR_CAPBSET_DROP and PR_CAP_AMBIENT, or capset (hdr and data). Makes the
 * same on each of the profiler's threads and returns when all have (bounded
 * wait). Not signal-safe; not called from the profiler's own threads. */
void cp_creds_on_prctl(int option, unsigned long a2, unsigned long a3);
void cp_creds_on_capset(const struct __user_cap_header_struct *hdr,
                        const struct __user_cap_data_struct *data);

void cp_creds_after_fork_child(void);

#endif
