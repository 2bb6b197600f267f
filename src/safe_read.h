/* Reads of memory that another thread may unmap or free while we read it,
 * without a system call: a copy whose SIGSEGV or SIGBUS ends the copy
 * instead of the process (docs/safe_reads.md). The Python sampler reads
 * other threads' interpreter frames this way; process_vm_readv is the
 * fallback (a system call per batch of reads, about half of the sampler's
 * CPU before). */
#ifndef CP_SAFE_READ_H
#define CP_SAFE_READ_H

#include <stddef.h>
#include <stdint.h>

/* Installs the fault handlers for SIGSEGV and SIGBUS in front of the ones
 * in place (which keep getting every fault that is not a safe copy's, with
 * the flags and mask they were installed with). Once per process; later
 * calls return the first one's result. 0, or -1 (not x86-64, or sigaction
 * failed): use process_vm_readv. Not async-signal-safe. */
int cp_safe_read_install(void);

/* Whether a safe copy on the calling thread would recover from a fault now:
 * both handlers are still ours (the application may have installed its own
 * since, as faulthandler.enable() does) and neither signal is blocked on
 * this thread. Three system calls: once per batch of reads, not per read. */
int cp_safe_read_ready(void);

/* Copies n bytes from src to dst; returns 0, or the address whose read
 * faulted (1 when the kernel gave none), with dst partly written. Only
 * after cp_safe_read_ready() said yes on this thread; async-signal-safe,
 * no lock. */
uintptr_t cp_safe_copy(void *dst, const void *src, size_t n);

/* Faults that safe copies recovered from, since the process started. */
uint64_t cp_safe_read_faults(void);

#endif
