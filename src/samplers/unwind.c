/* Stack capture in signal handlers. The fast path is unw_backtrace from the
 * handler (libunwind's per-thread trace cache makes each step a table
 * lookup); the frames of the handler and of the kernel's signal trampoline
 * are then cut off at the interrupted pc. If the interrupted pc is not found
 * (the trace stopped at the trampoline), the slow path steps from the signal's
 * ucontext with unw_init_local2.
 *
 * A thread's first unw_backtrace builds its trace cache. With libunwind 1.6
 * (Debian 12) that takes mmap and libunwind's own signal-masked pool lock,
 * never malloc (checked by interposing malloc around a thread's first
 * backtrace), so it is safe in a handler once the process-wide first call
 * was made outside (cp_unwind_tick), provided libunwind's thread-local block
 * came with the thread (see trace_tls_static). Warming every new thread up
 * eagerly instead cost 0.8 ms and 256 KiB of touched memory per thread created,
 * sampled or not, so threads are left to build the cache at their first
 * sample, and only busy threads build it (at their second sample caught
 * running: CPU samples, wall samples outside a system call): other samples
 * of a thread without one (wall samples of blocked threads) are unwound by
 * stepping from the ucontext (slower per sample, no 256 KiB per idle
 * thread). */
#define UNW_LOCAL_ONLY
#include "unwind.h"

#include <dlfcn.h>
#include <errno.h>
#include <libunwind.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "common.h"
#include "fork_guard.h"
#include "fpwalk.h"
#include "interpose/real.h"
#include "thread_state.h"

static int unwind_mode = CP_UNWIND_AUTO;

void cp_unwind_set_mode(int mode) {
  if (mode == CP_UNWIND_AUTO || mode == CP_UNWIND_FP || mode == CP_UNWIND_DWARF)
    unwind_mode = mode;
}

static CP_TLS int warmed_up;
/* The process's first unw_backtrace was made outside any handler (it
 * creates the trace cache's thread key): handlers may call it from then on,
 * building a thread's cache at its second busy sample. */
static int trace_ok;
/* Whether libunwind's thread-local block (the trace cache's pointer, the
 * only thread-local data unw_backtrace touches; unw_step touches none) is
 * allocated with every thread: libunwind was loaded with the program
 * (preloaded, linked). Loaded later by dlopen (the Python and Ruby
 * extensions, a program that dlopens libcontprof.so), glibc allocates that
 * block with malloc at each thread's first unw_backtrace (__tls_get_addr):
 * in a handler that interrupted malloc or free, on the arena lock its own
 * thread holds, a deadlock (seen in test_native's churn test). Handlers
 * then never call unw_backtrace: they step from the sample's context
 * (docs/signals.md, "libunwind's thread-local block"). */
static int trace_tls_static;
static CP_TLS int busy_samples; /* samples that could have built the cache */
/* Before the profiler's first tick a hook's stack is stepped from its
 * context, which costs 10 to 30 us here, where one from the trace cache
 * costs well under 1 us, and building the cache about 1 ms (its 256 KiB).
 * A thread that has stepped this many hook stacks has paid about what the
 * cache costs (the ski-rental rule: within twice the best choice made in
 * hindsight) and builds it: a program that allocates fast from its start
 * took 75,000 samples a second, each stepped, for its first second
 * (bench/alloc_overhead.sh: 1.69 times plain's CPU for the whole run). */
#define HERE_STEPS_BEFORE_CACHE 32
static CP_TLS int here_steps;

/* The calling thread's alternate signal stack, as the hooks last read it:
 * [alt_lo, alt_hi), empty when it has none. A thread can change its own
 * only: the sigaltstack hook (interpose/signal_calls.c) forgets the copy, and a
 * new thread starts with none known. Only while sigaltstack calls are known
 * to come here (alt_cache_ok: this library is first in the lookup order, as
 * when preloaded or linked) is the copy used. Otherwise, and after a raw
 * system call that changed the stack (not seen), every check asks the
 * kernel. */
static CP_TLS int alt_known;
static CP_TLS uintptr_t alt_lo, alt_hi;
static int alt_cache_ok;

void cp_unwind_on_sigaltstack(void) { alt_known = 0; }

/* Reading memory for libunwind without its pipe.
 *
 * libunwind (1.6 to 1.8 on x86_64) checks an address before it reads it
 * whenever the cursor's validate flag is set: on every unw_step (it is built
 * with CONSERVATIVE_CHECKS), so on our slow path, and on unw_backtrace's
 * fast path after a cache miss or a guessed frame. It checks by read() of
 * one byte from a pipe it opened at its initialisation and kept in two
 * static descriptor numbers, reopening it (close of both numbers) when
 * read() fails otherwise than with EAGAIN, then by a write() of one byte at
 * the address into the other end. An application that closed those numbers
 * and reused them (closefrom, a daemon closing 3..N, then its own sockets)
 * had a sampling handler block in read() on its socket for ever, or lose a
 * byte of its data, have a byte written into its file or its descriptors
 * closed (docs/security.md, "Descriptors shared with the application").
 *
 * So the local address space's access_mem accessor (the one caller of that
 * check) is replaced by ours at cp_unwind_init: unvalidated reads are plain
 * loads as before; validated ones are checked with a system call that takes
 * no descriptor. rt_sigprocmask with an invalid `how` copies the new mask in
 * first (EFAULT if any of its 8 bytes is unreadable) and then refuses `how`
 * (EINVAL), changing nothing. The pipe stays open but is never used again.
 * Other users of libunwind in the process get the same accessor (the same
 * semantics); the code stays mapped (the shared libraries are linked
 * -z nodelete; Python and Ruby never unload their extensions, which link it
 * statically). Within one of our unwinds, the pages found readable are
 * remembered (libunwind's own check remembered 4 pages per thread for the
 * life of the thread; ours forgets them at the next unwind, so a page
 * unmapped meanwhile is not trusted past it). */
#if UNW_VERSION >= UNW_VERSION_CODE(1, 6)
/* libunwind 1.6+ passes the ucontext with the validate flag in bit 0. */
#define ACCESS_VALIDATES(arg) (((uintptr_t)(arg)&1) != 0)
#else
/* Older ones pass the cursor there: check every read. */
#define ACCESS_VALIDATES(arg) 1
#endif
#define CP_PAGE 4096u
#define READABLE_PAGES 8
typedef int (*access_mem_fn)(unw_addr_space_t, unw_word_t, unw_word_t *, int,
                             void *);
static access_mem_fn libunwind_access_mem;
static CP_TLS int in_own_unwind; /* readable_page is ours to use */
static CP_TLS uintptr_t readable_page[READABLE_PAGES];
static CP_TLS unsigned readable_next;

static uint64_t rent_begin(int mode);
static void rent_end(uint64_t t0);
static CP_TLS uint64_t own_unwind_rent; /* rent_begin's, for the end */

/* Starts one of our unwinds with libunwind on this thread (the unwind mode
 * asked for: mode): no page is known readable yet, and the unwind pays its
 * rent while the walker's table is awaited (rent_begin). Returns 0 when a
 * fork is in progress: libunwind's cache lock must not be held across it
 * (fork_guard.h), and the caller does without. Async-signal-safe. */
static int own_unwind_begin(int mode) {
  if (!cp_fork_guard_enter())
    return 0;
  for (int i = 0; i < READABLE_PAGES; i++)
    readable_page[i] = 0;
  in_own_unwind = 1;
  own_unwind_rent = rent_begin(mode);
  return 1;
}

static void own_unwind_end(void) {
  rent_end(own_unwind_rent);
  in_own_unwind = 0;
  cp_fork_guard_exit();
}

/* Whether the 8 bytes at addr can be read. One system call, no descriptor;
 * errno is kept. Async-signal-safe. */
static int word_readable(uintptr_t addr) {
  if (addr < CP_PAGE)
    return 0; /* a NULL mask would be accepted without a read */
  int saved = errno;
  long rc = syscall(SYS_rt_sigprocmask, -1, addr, NULL, (size_t)8);
  int ok = rc == -1 && errno == EINVAL;
  errno = saved;
  return ok;
}

/* A word at any address (libunwind asks for unaligned ones too). */
typedef unw_word_t unaligned_word __attribute__((aligned(1), may_alias));

/* libunwind's access_mem with a descriptor-free check (see above). The
 * load reads other frames' stack slots, as libunwind's own (uninstrumented)
 * code did: not instrumented by AddressSanitizer either (scripts/sanitize).
 * Async-signal-safe and bounded. */
__attribute__((no_sanitize("address"))) static int
cp_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
              void *arg) {
  if (write)
    return libunwind_access_mem(as, addr, val, write, arg);
  if (ACCESS_VALIDATES(arg)) {
    uintptr_t page = (uintptr_t)addr & ~(uintptr_t)(CP_PAGE - 1);
    if (page == 0)
      return -1; /* never mapped; also what an empty readable_page holds */
    int same_page = ((uintptr_t)addr + sizeof(unw_word_t) - 1 - page) < CP_PAGE;
    int known = 0;
    if (in_own_unwind && same_page)
      for (int i = 0; i < READABLE_PAGES && !known; i++)
        known = readable_page[i] == page;
    if (!known) {
      if (!word_readable((uintptr_t)addr))
        return -1; /* what libunwind's check returns */
      if (in_own_unwind && same_page)
        readable_page[readable_next++ % READABLE_PAGES] = page;
    }
  }
  *val = *(const unaligned_word *)(uintptr_t)addr;
  return 0;
}

/* Installs cp_access_mem in libunwind's local address space (once; later
 * calls find it there). Not signal-safe: before sampling. */
static void replace_access_mem(void) {
  unw_accessors_t *acc = unw_get_accessors(unw_local_addr_space);
  if (!acc || acc->access_mem == cp_access_mem)
    return;
  libunwind_access_mem = acc->access_mem;
  __atomic_store_n(&acc->access_mem, cp_access_mem, __ATOMIC_RELEASE);
}

/* libunwind's object, found once per process (the object whose segment
 * holds unw_backtrace): that segment, whether the object has a name (not
 * linked into the executable), whether its thread-local block is in the
 * static area (trace_tls_static). */
static struct {
  int probed;
  uintptr_t lo, hi;
  int named, tls_preallocated;
} libunwind_obj;

static int probe_object(struct dl_phdr_info *info, size_t size, void *arg) {
  uintptr_t addr = (uintptr_t)arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type != PT_LOAD || addr - lo >= ph->p_memsz)
      continue;
    libunwind_obj.lo = lo;
    libunwind_obj.hi = lo + ph->p_memsz;
    libunwind_obj.named = info->dlpi_name && info->dlpi_name[0];
    /* A block of the static area is there from the thread's start; one
     * allocated on demand is not until the thread's first use. Without
     * the answer (an older glibc): not static. */
    libunwind_obj.tls_preallocated =
        size >= offsetof(struct dl_phdr_info, dlpi_tls_data) +
                    sizeof info->dlpi_tls_data &&
        (info->dlpi_tls_modid == 0 || info->dlpi_tls_data != NULL);
    return 1;
  }
  return 0;
}

/* Finds libunwind's object the first time, on the thread that starts the
 * profiler and before contprof's own first unw_backtrace: asked again
 * after it (every sampler's start calls cp_unwind_init; with
 * CONTPROF_UNWIND=dwarf the first one made a backtrace), a dlopen'ed
 * libunwind would look static. A program that called unw_backtrace on this
 * thread before would make it look static too (not handled). Not
 * signal-safe. */
static void probe_libunwind(void) {
  if (libunwind_obj.probed)
    return;
  libunwind_obj.probed = 1;
  dl_iterate_phdr(probe_object, (void *)(uintptr_t)&unw_backtrace);
}

int cp_unwind_libunwind_code(uintptr_t *lo, uintptr_t *hi) {
  probe_libunwind();
  if (!libunwind_obj.named)
    return 0;
  *lo = libunwind_obj.lo;
  *hi = libunwind_obj.hi;
  return 1;
}

/* The loader's dl_load_write_lock (a recursive pthread mutex in ld.so's
 * _rtld_global, whose layout is private): found at start as the one mutex
 * there that the calling thread owns inside a dl_iterate_phdr callback and
 * no one owns after it. NULL when not found (then only r_state and
 * in_loader tell). Its lock word and owner (pthread_mutex_t's first and
 * third int on x86-64 glibc). */
static int *write_lock;

static int find_write_lock(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)info;
  (void)size;
  int **found = arg;
  Dl_info di;
  const ElfW(Sym) *sym = NULL;
  void *g = dlsym(RTLD_DEFAULT, "_rtld_global");
  if (!g || !dladdr1(g, &di, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
      sym->st_size < 3 * sizeof(int))
    return 1;
  int tid = (int)cp_gettid(), n = 0;
  for (size_t off = 0; off + 3 * sizeof(int) <= sym->st_size;
       off += sizeof(int)) {
    int *m = (int *)((char *)g + off);
    if (m[2] == tid && m[0] != 0 && m[1] >= 1 && n++ == 0)
      *found = m;
  }
  if (n != 1)
    *found = NULL;
  return 1; /* one callback is enough */
}

static void probe_write_lock(void) {
  int *found = NULL;
  dl_iterate_phdr(find_write_lock, &found);
  /* Released since: the mutex it is, not a copy of the tid. */
  write_lock = found && found[0] == 0 && found[2] == 0 ? found : NULL;
  if (!write_lock)
    cp_debug("the loader's write lock was not found: only _r_debug tells "
             "when the loader holds it");
}

/* Whether the calling thread holds the loader's write lock, or was caught
 * between its lock word and its owner (taking or releasing it): a recursive
 * mutex's re-entry would wait forever there (seen: a wall signal in
 * dlopen's release of it, then dl_iterate_phdr from libunwind). Another
 * thread's hold is waited for, as before; another thread in that window
 * leaves it within nanoseconds, so a state that stays half-taken for a
 * thousand pauses (15-50 us) is this thread's, which cannot go on while its
 * handler runs (an ASan build's threads, taking the lock often, made
 * "half-taken" alone cut a sample in 1,500). Async-signal-safe, bounded. */
static int write_lock_here(void) {
  if (!write_lock)
    return 0;
  int self = (int)cp_gettid();
  for (int spin = 0; spin < 1000; spin++) {
    int word = __atomic_load_n(&write_lock[0], __ATOMIC_RELAXED);
    int owner = __atomic_load_n(&write_lock[2], __ATOMIC_RELAXED);
    if (owner == self)
      return 1;
    if (word == 0 || owner != 0)
      return 0; /* free, or another thread's: waited for if need be */
    __builtin_ia32_pause();
  }
  return 1;
}

void cp_unwind_init(void) {
  /* What it sets up holds for the address space: done once, and a child of
   * fork inherits it (libunwind's pools and accessors, our findings), where
   * doing it again at every restart cost the forking thread of each child
   * a dlsym and a step of libunwind through copy-on-write pages. */
  static int done;
  cp_interpose_loader_resolve();
  if (!done) {
    probe_libunwind();
    probe_write_lock();
    trace_tls_static = libunwind_obj.tls_preallocated;
    /* Before the first unwind of ours: unw_get_accessors initialises
     * libunwind (and opens its pipe, unused from then on). */
    replace_access_mem();
    alt_cache_ok = cp_interpose_sees_sigaltstack();
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  }
  cp_fpwalk_main_thread_start(); /* its bounds, also for the wait hooks */
  /* With the walker, libunwind only takes the samples it cannot: the
   * process-wide first unw_backtrace (its trace cache's key, 256 KiB of
   * cache and 1 ms of page faults here) waits for the profiler's first
   * tick, with the walker's table (cp_unwind_tick); until then such
   * samples are stepped from their context. */
  if (unwind_mode == CP_UNWIND_DWARF) {
    cp_unwind_warm_up();
  } else {
    /* One step from here all the same: libunwind maps its memory pools at
     * its first unwind, which is better not made in a handler. */
    if (!done && cp_fork_guard_enter()) { /* not in a handler: always 1 */
      unw_context_t ctx;
      unw_cursor_t cursor;
      unw_getcontext(&ctx);
      if (unw_init_local(&cursor, &ctx) == 0)
        unw_step(&cursor);
      cp_fork_guard_exit();
    }
    cp_fpwalk_init_later();
  }
  done = 1;
}

/* The ski-rental rule again, on time measured: until the walker's table
 * exists, `auto` hands every sample to libunwind, and each pays a rent, what
 * libunwind took over what the walk would have (WALK_NS). Once the rents
 * sum to what building the table costs (a small program's 3 ms here), it
 * is built: never more than twice the cost of the best choice made in
 * hindsight. The rent varies a hundredfold: a hook's stack from libunwind's
 * trace cache costs about 1 us, a CPU sample's stepped from its signal's
 * context 60 to 100 us in bench/cpu_work (libunwind blocks and unblocks
 * every signal around its lookups, two system calls of 1.2 us here each
 * time). A count of samples, the rule before (1,000), made a program
 * sampled at 100 Hz wait for the tick, a second of samples at that price
 * (bench/early_table.sh). One sample's rent is at most RENT_MAX_NS: a
 * longer one was preempted. */
#define TABLE_COST_NS 3000000ull
#define WALK_NS 200ull
#define RENT_MAX_NS 1000000ull
static atomic_ullong rent_ns, rent_samples;
static void (*rent_paid)(void);

void cp_unwind_on_rent_paid(void (*wake)(void)) { rent_paid = wake; }

/* When this unwind of libunwind's is one the walker would have taken, had
 * its table existed: its start, else 0. Async-signal-safe. */
static uint64_t rent_begin(int mode) {
  if (mode != CP_UNWIND_AUTO || !cp_fpwalk_table_pending())
    return 0;
  return cp_monotonic_ns();
}

/* Adds the rent of the unwind begun at t0; the sample that completes
 * the table's cost calls rent_paid once (it wakes the thread that asks
 * cp_unwind_early_due). Async-signal-safe. */
static void rent_end(uint64_t t0) {
  if (!t0)
    return;
  uint64_t took = cp_monotonic_ns() - t0;
  if (took <= WALK_NS)
    return;
  uint64_t rent = took - WALK_NS < RENT_MAX_NS ? took - WALK_NS : RENT_MAX_NS;
  atomic_fetch_add_explicit(&rent_samples, 1, memory_order_relaxed);
  uint64_t before =
      atomic_fetch_add_explicit(&rent_ns, rent, memory_order_relaxed);
  void (*wake)(void) = rent_paid;
  if (before < TABLE_COST_NS && before + rent >= TABLE_COST_NS && wake) {
    int saved = errno;
    wake();
    errno = saved;
  }
}

int cp_unwind_early_due(void) {
  return cp_fpwalk_table_pending() &&
         atomic_load_explicit(&rent_ns, memory_order_relaxed) >= TABLE_COST_NS;
}

int cp_unwind_tick_due(void) {
  return cp_fpwalk_refresh_due() ||
         !__atomic_load_n(&trace_ok, __ATOMIC_ACQUIRE);
}

void cp_unwind_tick(void) {
  if (cp_unwind_early_due())
    cp_debug("unwinder: building its table, paid for: the %llu samples "
             "sent to libunwind while it was awaited took %.1f ms more than "
             "walks would have",
             (unsigned long long)atomic_load(&rent_samples),
             (double)atomic_load(&rent_ns) / 1e6);
  cp_fpwalk_refresh();
  if (!__atomic_load_n(&trace_ok, __ATOMIC_ACQUIRE))
    cp_unwind_warm_up();
}

void cp_unwind_warm_up(void) {
  if (warmed_up || !cp_fork_guard_enter())
    return;
  void *frames[8];
  unw_backtrace(frames, 8);
  cp_fork_guard_exit();
  warmed_up = 1;
  __atomic_store_n(&trace_ok, 1, __ATOMIC_RELEASE);
}

/* Async-signal-safe: libunwind from the interrupted context, no cache.
 * With slots, also where each return address was found
 * (cp_unwind_signal_slots), and 0 frames when libunwind cannot start;
 * without, the interrupted pc alone then. The load of a return address is
 * outside AddressSanitizer, as cp_access_mem. */
__attribute__((no_sanitize("address"))) static size_t
unwind_from_context(ucontext_t *uc, uint64_t *frames, uint64_t *slots,
                    size_t max_frames, int *truncated) {
  unw_cursor_t cursor;
  size_t n = 0;
  uint64_t below = 0; /* the previous frame's slot */
  if (unw_init_local2(&cursor, (unw_context_t *)uc, UNW_INIT_SIGNAL_FRAME) !=
      0) {
    if (slots)
      return 0;
    frames[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    return 1;
  }
  do {
    unw_word_t ip, sp;
    if (unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0)
      break;
    if (n == max_frames) {
      *truncated = 1;
      break;
    }
    if (slots) {
      /* Where libunwind read this frame's pc: for a caller, the word just
       * below its stack pointer (its callee's canonical frame address),
       * where the call pushed it; for the code a signal interrupted, the
       * saved context's rip on the stack (a PostgreSQL WAL writer runs, for
       * its whole life, inside the postmaster's SIGCHLD handler that forked
       * it: without that slot its stacks were never parked). */
      slots[n] = 0;
      uint64_t at = 0;
      unw_save_loc_t loc;
      if (n > 0 && unw_get_save_loc(&cursor, UNW_REG_IP, &loc) == 0 &&
          loc.type == UNW_SLT_MEMORY)
        at = loc.u.addr;
      else if (n > 0 && unw_get_reg(&cursor, UNW_REG_SP, &sp) == 0 && sp >= 8)
        at = sp - 8;
      if (at && (at & 7) == 0 && at > below && word_readable(at) &&
          *(const uint64_t *)(uintptr_t)at == ip) {
        slots[n] = at;
        below = at;
      }
    }
    frames[n++] = ip;
  } while (unw_step(&cursor) > 0);
  if (n == 0 && !slots)
    frames[n++] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
  return n;
}

/* Whether this handler runs on the thread's alternate signal stack with less
 * than CP_UNWIND_STACK_NEED bytes left below it. Our handlers are installed
 * without SA_ONSTACK, so they run on the interrupted stack: the alternate
 * one only when they interrupt code running there (the application's own
 * SA_ONSTACK handlers block our signals, see signals.c, but one installed
 * with the raw system call, or code that runs on that stack otherwise, does
 * not). The kernel saved the alternate stack's bounds in the ucontext. (With
 * SS_AUTODISARM they read as disabled there: not detected.) Async-signal-safe.
 */
static int alt_stack_short(const ucontext_t *uc) {
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  uintptr_t base = (uintptr_t)uc->uc_stack.ss_sp;
  size_t size = uc->uc_stack.ss_size;
  if ((uc->uc_stack.ss_flags & SS_DISABLE) || size == 0 || sp - base >= size)
    return 0;
  return sp - base < CP_UNWIND_STACK_NEED;
}

/* Whether unwinding could deadlock with the dynamic loader. libunwind takes
 * a lock of its own (with every signal blocked) and, holding it, calls
 * dl_iterate_phdr, which takes the loader's dl_load_write_lock. dlopen and
 * dlclose hold that lock while they change the list of objects; a sampling
 * signal (or a sampled malloc) there whose unwinding then waits for
 * libunwind's lock, held by another thread that waits for the loader's,
 * deadlocks both (seen: test_hardening's dlopen loop, a dlclose interrupted
 * in munmap). The loader marks the whole of that (r_state RT_ADD or
 * RT_DELETE, set before it takes the lock and reset after it releases it):
 * meanwhile every thread keeps its leaf only. A thread inside
 * dl_iterate_phdr holds the same lock: the interposed dl_iterate_phdr
 * (interpose/loader.c) marks it. Async-signal-safe: two loads. */
static int loader_busy(void) {
  return __atomic_load_n(&_r_debug.r_state, __ATOMIC_RELAXED) !=
             RT_CONSISTENT ||
         cp_thread.in_loader || write_lock_here();
}

/* The interrupted registers, and the alternate signal stack as the kernel
 * saved it in the ucontext ([0, 0) when none). Async-signal-safe. */
static void interrupted_regs(const ucontext_t *uc, cp_fp_regs *r, uintptr_t *lo,
                             uintptr_t *hi) {
  r->pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
  r->sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
  r->bp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
  *lo = *hi = 0;
  if (!(uc->uc_stack.ss_flags & SS_DISABLE) && uc->uc_stack.ss_size > 0) {
    *lo = (uintptr_t)uc->uc_stack.ss_sp;
    *hi = *lo + uc->uc_stack.ss_size;
  }
}

/* cp_unwind_signal once unwinding may start. Async-signal-safe. */
static size_t unwind_signal(ucontext_t *uc, uint64_t *frames, size_t max_frames,
                            int may_build_cache, int *truncated) {
  uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
  size_t capacity = max_frames + CP_UNWIND_SLACK;
  /* The cache is built at the second busy sample: a thread sampled once
   * (a short burst) may be idle for the rest of its life. */
  if (!trace_tls_static ||
      (!warmed_up && (!__atomic_load_n(&trace_ok, __ATOMIC_ACQUIRE) ||
                      !may_build_cache || ++busy_samples < 2)))
    return unwind_from_context(uc, frames, NULL, max_frames, truncated);
  warmed_up = 1;
  int got = unw_backtrace((void **)frames, (int)capacity);
  size_t skip = 0;
  while ((int)skip < got && frames[skip] != pc)
    skip++;
  if ((int)skip >= got || skip >= CP_UNWIND_SLACK)
    return unwind_from_context(uc, frames, NULL, max_frames, truncated);
  size_t n = (size_t)got - skip;
  if (n > max_frames || (size_t)got == capacity) {
    *truncated = 1;
    if (n > max_frames)
      n = max_frames;
  }
  memmove(frames, frames + skip, n * sizeof *frames);
  return n;
}

/* Async-signal-safe. */
size_t cp_unwind_signal(void *ucontext, uint64_t *frames, size_t max_frames,
                        int may_build_cache, int *truncated) {
  return cp_unwind_signal_mode(ucontext, frames, max_frames, may_build_cache,
                               truncated, unwind_mode);
}

/* Async-signal-safe. */
size_t cp_unwind_signal_mode(void *ucontext, uint64_t *frames,
                             size_t max_frames, int may_build_cache,
                             int *truncated, int mode) {
  ucontext_t *uc = ucontext;
  *truncated = 0;
  if (alt_stack_short(uc) || loader_busy()) {
    /* No room to unwind, or unwinding could deadlock with the loader: the
     * sample keeps its leaf only. */
    frames[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    return 1;
  }
  if (mode != CP_UNWIND_DWARF) {
    /* The frame-pointer walk from the interrupted registers, bounded by the
     * stack they were on. 0: libunwind's turn. */
    cp_fp_regs r;
    uintptr_t lo, hi;
    interrupted_regs(uc, &r, &lo, &hi);
    size_t n = cp_fpwalk(&r, lo, hi, (cp_unwind_mode)mode, 1, frames,
                         max_frames, truncated);
    if (n)
      return n;
  }
  if (!own_unwind_begin(mode)) {
    frames[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    return 1; /* a fork is in progress: the leaf only */
  }
  size_t n = unwind_signal(uc, frames, max_frames, may_build_cache, truncated);
  own_unwind_end();
  return n;
}

/* Async-signal-safe. */
size_t cp_unwind_signal_slots(void *ucontext, uint64_t *frames, uint64_t *slots,
                              size_t max_frames, int *truncated) {
  ucontext_t *uc = ucontext;
  *truncated = 0;
  if (alt_stack_short(uc) || loader_busy())
    return 0;
  if (unwind_mode != CP_UNWIND_DWARF) {
    /* The walker knows where it read each return address: a few hundred
     * ns where libunwind with its save locations took tens of us, with
     * two signal-mask changes per object it looked up (docs/signals.md,
     * "Parked threads"). It stops at a signal frame: libunwind's turn. */
    cp_fp_regs r;
    uintptr_t lo, hi;
    interrupted_regs(uc, &r, &lo, &hi);
    size_t n = cp_fpwalk_slots(&r, lo, hi, (cp_unwind_mode)unwind_mode, frames,
                               slots, max_frames, truncated);
    if (n)
      return n;
  }
  if (!own_unwind_begin(unwind_mode))
    return 0;
  size_t n = unwind_from_context(uc, frames, slots, max_frames, truncated);
  own_unwind_end();
  return n;
}

/* Whether the calling thread runs on its alternate signal stack with less
 * than CP_UNWIND_STACK_NEED bytes left: a hook called from the application's
 * SA_ONSTACK handler (malloc in a crash handler). Reads the stack's bounds
 * with one system call per thread (and per sigaltstack call), not per
 * sample (about 0.1 us here, a third of what a sample costs its thread
 * otherwise). Async-signal-safe. */
static int here_on_short_alt_stack(void) {
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  if (!alt_known || !alt_cache_ok) {
    stack_t ss;
    if (syscall(SYS_sigaltstack, NULL, &ss) != 0)
      return 0;
    /* With SS_AUTODISARM the kernel reports no stack while a handler runs
     * on it: then it is not detected (docs/signals.md). */
    int has = !(ss.ss_flags & SS_DISABLE) && ss.ss_size > 0;
    alt_lo = has ? (uintptr_t)ss.ss_sp : 0;
    alt_hi = has ? (uintptr_t)ss.ss_sp + ss.ss_size : 0;
    alt_known = 1;
  }
  return sp - alt_lo < alt_hi - alt_lo && sp - alt_lo < CP_UNWIND_STACK_NEED;
}

/* The frame-pointer walk from here (the registers of this function, its
 * exact pc), then cut at the hook's caller as cp_unwind_here does. 0 when
 * the walk fails or does not pass through caller_ra. Not inlined: its own
 * .eh_frame rule describes the registers read. Async-signal-safe. */
__attribute__((noinline)) static size_t walk_here(uint64_t *frames,
                                                  size_t max_frames,
                                                  uint64_t caller_ra,
                                                  int *truncated, int mode) {
  cp_fp_regs r;
  __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
                   : "=r"(r.pc), "=r"(r.sp), "=r"(r.bp));
  size_t capacity = max_frames + CP_UNWIND_SLACK;
  int walk_truncated = 0;
  size_t got = cp_fpwalk(&r, alt_lo, alt_hi, (cp_unwind_mode)mode, 1, frames,
                         capacity, &walk_truncated);
  size_t skip = 0;
  while (skip < got && skip < CP_UNWIND_SLACK && frames[skip] != caller_ra)
    skip++;
  if (skip >= got || skip >= CP_UNWIND_SLACK)
    return 0;
  size_t n = got - skip;
  if (n > max_frames || walk_truncated) {
    *truncated = 1;
    if (n > max_frames)
      n = max_frames;
  }
  memmove(frames, frames + skip, n * sizeof *frames);
  frames[0] = caller_ra - 1;
  return n;
}

/* Bounded and lock-free once the thread is warmed up (see unwind.h). */
size_t cp_unwind_here(uint64_t *frames, size_t max_frames, uint64_t caller_ra,
                      int *truncated) {
  return cp_unwind_here_mode(frames, max_frames, caller_ra, truncated,
                             unwind_mode);
}

/* Bounded and lock-free once the thread is warmed up. */
size_t cp_unwind_here_mode(uint64_t *frames, size_t max_frames,
                           uint64_t caller_ra, int *truncated, int mode) {
  size_t capacity = max_frames + CP_UNWIND_SLACK;
  *truncated = 0;
  if (loader_busy() || here_on_short_alt_stack()) {
    /* Unwinding could deadlock with the loader, or there is no room for
     * it: the caller only. */
    frames[0] = caller_ra - 1;
    return 1;
  }
  if (mode != CP_UNWIND_DWARF) {
    /* here_on_short_alt_stack read the alternate stack's bounds. */
    cp_thread.in_handler = 1;
    size_t n = walk_here(frames, max_frames, caller_ra, truncated, mode);
    cp_thread.in_handler = 0;
    if (n)
      return n;
    *truncated = 0;
  }
  /* A sampling signal arriving meanwhile must not unwind on top of this
   * unwind (libunwind's per-thread cache): its handler drops its sample. */
  /* Before the profiler's first tick (cp_unwind_init) a thread steps from
   * here for its first hook stacks, then builds its trace cache (see
   * HERE_STEPS_BEFORE_CACHE). */
  int step = !warmed_up && !__atomic_load_n(&trace_ok, __ATOMIC_ACQUIRE) &&
             here_steps < HERE_STEPS_BEFORE_CACHE;
  unw_context_t ctx;
  cp_thread.in_handler = 1;
  if (step) {
    here_steps++;
    unw_getcontext(&ctx);
  } else {
    cp_unwind_warm_up();
  }
  if (!own_unwind_begin(mode)) {
    cp_thread.in_handler = 0;
    frames[0] = caller_ra - 1; /* a fork is in progress: the caller only */
    return 1;
  }
  int got = step ? (int)unwind_from_context((ucontext_t *)&ctx, frames, NULL,
                                            capacity, truncated)
                 : unw_backtrace((void **)frames, (int)capacity);
  own_unwind_end();
  cp_thread.in_handler = 0;
  *truncated = 0; /* decided below, from the frames the caller keeps */
  size_t skip = 0;
  while ((int)skip < got && skip < CP_UNWIND_SLACK && frames[skip] != caller_ra)
    skip++;
  if ((int)skip >= got || skip >= CP_UNWIND_SLACK) {
    /* The hook's caller is not where the trace went: keep just the caller. */
    frames[0] = caller_ra - 1;
    return 1;
  }
  size_t n = (size_t)got - skip;
  if (n > max_frames || (size_t)got == capacity) {
    *truncated = 1;
    if (n > max_frames)
      n = max_frames;
  }
  memmove(frames, frames + skip, n * sizeof *frames);
  frames[0] = caller_ra - 1;
  return n;
}
