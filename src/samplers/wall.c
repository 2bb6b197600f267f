/* Wall-clock sampler: time is cut into windows of one wall interval, and a
 * timer thread wakes once in each, at a point drawn uniformly in it
 * (stratified sampling: work in step with the interval is not aliased). It
 * draws at most threads_per_tick of the application's threads uniformly at
 * random and has each drawn thread record its stack, whether it runs or
 * blocks, credited with the thread's wall time since it was last drawn
 * (take_owed): each thread's total is its wall time, exactly, up to its
 * last draw.
 *
 * Parked time, credited exactly. A thread in a wait hook whose parked
 * stack (below) the hook found to be its stack is parked there until the
 * hook returns: the hook reads the clock as it parks and as it leaves (a
 * vDSO read each, no system call) and adds the park's length to that
 * parked stack's credit (park_from, end_exact_park). A tick that finds a
 * thread so parked records nothing for it and does not wake; the time it
 * owes the thread is less its parks' time, and goes to where a later tick
 * finds it elsewhere. The credits are recorded, one sample per parked
 * stack, at least once a second (CREDIT_EVERY_NS), as a period closes and
 * as the thread ends; a park that lasts is credited up to then. So a
 * server thread that parks 80% of its time has that time exactly, per
 * wait, and its windows can grow as an idle process's do (below): the
 * ticks that find every thread parked count as idle. What a tick does
 * (take a parked stack, record a credit) takes effect on the credit from
 * the end of its window on (exact_from), so that which of a window's
 * moments are credited exactly does not depend on where its tick fell. A
 * park whose labels or span are not its parked stack's, when the stack
 * owes a credit under the old ones, is sampled as before (rekey). Not with
 * CONTPROF_TIMELINE: each of its samples stands for its moment.
 *
 * While every thread of the process sleeps where it slept (each tick found
 * all of them blocked, below; a parked thread may have run a little in
 * between, PARKED_IDLE_SHARE), the next window is twice as long, up to
 * IDLE_WINDOWS_MAX intervals, and the first tick that finds a thread that
 * ran brings it back to one interval. A window's length is fixed before its
 * tick is drawn, so the credit stays unbiased; an idle process wakes the
 * timer thread 2.5 times a second instead of 20 (at the default 50 ms).
 *
 * A drawn thread that was blocked in a system call when its last stack was
 * taken, and whose CPU clock has not advanced more than IDLE_CPU_NS since, is
 * still blocked where it was: the timer thread records that stack again
 * itself, with no signal. (A thread last seen running is always signalled:
 * having used no CPU since may only mean it was preempted, and it may leave
 * that code within microseconds of resuming. A thread that goes from one
 * blocking call to another with under IDLE_CPU_NS of CPU in between keeps
 * its previous stack until it next runs longer, unless it entered or left a
 * wait hook meanwhile: stack_park_gen.)
 *
 * Parked threads. A server thread runs a little between ticks and blocks
 * again, most often at the same point of its event loop: the rule above
 * never applies to it, and a signal that finds it blocked wakes it, which
 * costs it far more than the sample (docs/overhead.md). The wait hooks
 * (interpose/waits.c) publish in the thread's slot where it blocks: the
 * hook's canonical frame address, and the thread's labels and span, under a
 * sequence count (cp_wall_park). When the handler finds its thread blocked
 * in a wait hook, it unwinds with the address of every return address
 * (cp_unwind_signal_slots) and keeps that "parked stack". When the thread
 * next enters a wait hook at the same frame address, the hook itself checks
 * the stack words of the parked stack's frames from the hook's outwards
 * (its own live stack, within the bounds recorded at its start: no system
 * call, no fault) and, when every one still holds its return address,
 * publishes with the park that the parked stack is its stack
 * (park_way and park_checked: which parked stack, and its seq). A tick
 * that finds the thread parked at that frame address with that check, the
 * sequence count unmoved, records the parked stack with no signal. A thread
 * that waits in several places keeps a parked stack for each (PARKED_WAYS).
 * A thread blocked at the same frame address is blocked in the same hook,
 * called from the same depth: its frames from there outwards are live, and
 * they hold the same return addresses, so its stack is that stack down to
 * the hook. (Below the hook, the C library's frames down to the system
 * call are the parked stack's: not checked, as they do not exist yet when
 * the hook checks.
 * Not told apart: a thread running the application's signal handler on top
 * of a wait hook; the stack is then the blocked one, as a signal would have
 * seen it once the handler returned.)
 *
 * Otherwise the thread is
 * sent a queued signal (rt_tgsigqueueinfo) whose value names its slot; the
 * handler unwinds into the slot's preallocated stack buffer and records the
 * sample. So a thousand idle threads cost a few clock reads per tick, not a
 * thousand signals.
 *
 * Per-thread slot protocol: pending_ns > 0 means a signal is outstanding (or
 * its handler runs) and the handler owns the slot's stack; the timer thread
 * adds each tick's weight to pending_ns and signals only when it was 0, and
 * touches the slot's stack only then. The handler records what is pending
 * and subtracts it, looping if the timer added more meanwhile, so no weight
 * is lost and no signal is sent while one is outstanding. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "aggregator/aggregator.h"
#include "common.h"
#include "fpwalk.h"
#include "kernel_cost.h"
#include "labels.h"
#include "passthrough.h"
#include "random.h"
#include "record.h"
#include "sampler.h"
#include "signals.h"
#include "stats.h"
#include "thread_state.h"
#include "threads.h"
#include "trace.h"
#include "unwind.h"
#include "wall.h"

#define WALL_COOKIE 0x77616c6cull /* "wall", in the high half of si_value */
/* CPU a blocked thread may use since its stack and stay "still blocked":
 * at least IDLE_CPU_NS; twice what this machine is seen to spend returning
 * from our handler to the blocked call (wall.return_ns), at most
 * IDLE_CPU_MAX_NS. */
#define IDLE_CPU_NS 10000
#define IDLE_CPU_MAX_NS 50000
#define IDLE_WINDOWS_MAX 8 /* the longest window, in intervals */
/* A thread found parked at two ticks in a row that used under 1/64 of the
 * window's time on the CPU in between (PostgreSQL's background writers: 50
 * us every 200 ms) is idle for the windows: what it did in between is its
 * CPU profile's to show, and its wall time goes to the wait where every
 * tick finds it. Only the windows' length depends on it, which is fixed
 * before each tick is drawn: the credit stays unbiased. */
#define PARKED_IDLE_SHARE 64
/* Parked stacks kept per thread: a PostgreSQL backend blocks for its client
 * in one place and for row locks and its semaphore in others, and with one
 * parked stack every change of place cost a signal that woke it (60 to 135
 * of its 100 to 200 wall signals in 12 s of pgbench). */
#define PARKED_WAYS 4
#define PARK_WAY_BITS 2 /* park_from's low bits: PARKED_WAYS ways */
_Static_assert(PARKED_WAYS <= 1 << PARK_WAY_BITS, "park_from's way bits");
/* Parked time credited exactly is recorded at least this often (and as a
 * period closes, and as its thread ends). */
#define CREDIT_EVERY_NS 1000000000ull
/* One signal in this many has its wakeup timed (two clock reads, one on
 * each side); the time counts for that many. */
#define WAKEUP_TIMED_EVERY 8
/* A longer gap is not a wakeup's: the thread ran (preempted, or it was not
 * blocked) between the timer's reading and its handler. */
#define WAKEUP_MAX_NS 2000000
#define CHUNK_BITS 8
#define CHUNK_SLOTS (1u << CHUNK_BITS)
#define MAX_CHUNKS 64
#define MAX_THREADS (CHUNK_SLOTS * MAX_CHUNKS) /* 16384 threads sampled */
#define CPUCLOCK_SCHED 2
#define CPUCLOCK_PERTHREAD 4

/* One parked stack: taken by the handler in a wait hook whose frame address
 * was cfa; slots[i] (i >= 1) is the address of the stack word that held
 * frames[i]. n is 0 when there is none. Written by the handler on the
 * slot's thread, read by the thread's wait hooks (which check seq, moved by
 * every rewrite, around their reads) and by the timer (only while no signal
 * is outstanding, as frames). */
typedef struct parked_stack {
  uint64_t *frames, *slots; /* the slot's frames_cap entries each */
  uint32_t n;
  uint32_t truncated;
  uintptr_t cfa;
  uint64_t used;        /* the slot's parked_clock at its last use */
  _Atomic uint32_t seq; /* never 0 once a stack was taken */
  /* Parked time credited exactly ("Parked time" above): the parks on this
   * stack add their length to credit_ns, and whoever holds credit_lock
   * records it (the timer, the handler before it takes another stack
   * here) with the key: the labels and span the stack was taken or last
   * keyed with (a park with others is sampled instead, unless nothing is
   * owed and the hook keys the stack anew). Parks on it count from
   * exact_from on: the end of the window in which it was taken or keyed. */
  _Atomic uint64_t credit_ns;
  _Atomic uint32_t credit_lock;
  uint32_t key_labels;
  uint64_t key_span_id, key_local_root_span_id;
  _Atomic uint64_t exact_from;
} parked_stack;

typedef struct wall_slot {
  _Atomic pid_t tid;          /* 0: free */
  _Atomic int64_t pending_ns; /* wall time owed to the next sample */
  _Atomic int64_t pending_count;
  clockid_t clock; /* the thread's CPU clock */
  /* The last stack, written by the handler while pending_ns > 0 and read by
   * the timer thread while it is 0. */
  uint64_t *frames; /* frames_cap entries: max_frames + CP_UNWIND_SLACK */
  size_t frames_cap;
  uint32_t nframes;
  uint32_t truncated;
  uint32_t labels;
  int have_stack;
  int in_syscall; /* the stack was taken in a blocking system call */
  uint64_t span_id, local_root_span_id;
  uint64_t stack_cpu_ns; /* thread CPU time when the stack was taken */
  /* park_gen then: a wait hook entered or left since moves it, and the
   * stack is not reused (the thread went elsewhere with little CPU). */
  uint32_t stack_park_gen;
  uint64_t stack_hash; /* of frames, when taken in a system call */
  /* The CPU the thread had used since stack_cpu_ns when the timer sent the
   * signal (0: unknown). Timer writes, handler reads. */
  _Atomic uint64_t signal_delta_ns;
  /* Its CPU time at the last tick that reused its parked stack (0: that
   * tick did not): one that has not moved since is idle too. Timer only. */
  uint64_t parked_tick_cpu_ns;
  /* The thread's CPU time when the timer signalled it, for one signal in
   * WAKEUP_TIMED_EVERY (0: this one is not timed): the handler's measure of
   * what waking it cost (wakeup_cost). */
  _Atomic uint64_t sent_cpu_ns;
  /* Where the thread blocks now, written by the thread's wait hooks
   * (cp_wall_park) at any time: park_gen is odd while they write;
   * park_cfa is 0 while the thread is not in one. */
  _Atomic uint32_t park_gen;
  _Atomic uintptr_t park_cfa;
  _Atomic uint32_t park_labels;
  _Atomic uint64_t park_span_id, park_local_root_span_id;
  /* The parked stack the wait hook found to be its stack (park_way) and
   * that one's seq then (park_checked, 0: not checked), published with
   * park_cfa. */
  _Atomic uint32_t park_checked;
  _Atomic uint32_t park_way;
  /* The parked stacks, one per place the thread was found blocked at (a
   * server waits for its client in one place and for a lock in others):
   * ways [0, parked_ways) have buffers. The timer gives a thread the
   * others the first time it finds it blocked in a wait hook elsewhere
   * than its first parked stack (ensure_parked_ways). */
  parked_stack parked[PARKED_WAYS];
  _Atomic uint32_t parked_ways;
  /* The park in progress whose time is credited exactly: the time from
   * which it is not credited yet, shifted left by PARK_WAY_BITS, or'd with
   * its parked stack's way; 0: none. The thread sets it as it parks and
   * takes it as it leaves; the timer moves it on as it credits a park that
   * lasts. */
  _Atomic uint64_t park_from;
  /* All the time credited exactly so far (the parks that ended, and the
   * part of one in progress the timer credited). Thread and timer add. */
  _Atomic uint64_t parked_total_ns;
  /* The timer's account: its wall time is accounted up to acct_ns, when
   * parked_total_ns and the park in progress came to acct_parked_ns;
   * owed_ns of it is not credited yet (found in a park credited exactly,
   * it waits for a tick that finds the thread elsewhere). */
  uint64_t acct_ns, acct_parked_ns;
  int64_t owed_ns;
  uint64_t parked_clock; /* the thread's: stamps each way's last use */
} wall_slot;

static struct {
  pthread_mutex_t lock; /* slot allocation, live[], the timer's state */
  pthread_cond_t wake;  /* stop requested */
  wall_slot *_Atomic chunks[MAX_CHUNKS]; /* never freed: handlers may hold */
  _Atomic uint32_t nslots;               /* slots made so far */
  uint32_t *free_slots, nfree;
  uint32_t *live; /* slots of the application's threads */
  size_t nlive;
  pthread_t thread;
  int thread_running;
  int stop;
  int signal;
  _Atomic pid_t pid; /* this process, read at start (and after fork) */
  uid_t uid;
  uint64_t interval_ns;      /* in force: base times the governor's factor */
  uint64_t base_interval_ns; /* CONTPROF_WALL_INTERVAL_MS */
  size_t per_tick;
  _Atomic size_t max_frames;
  _Atomic int active;
  /* Parks are credited exactly (not with CONTPROF_TIMELINE, whose samples
   * each stand for their moment; a credit stands for up to a second). */
  _Atomic int exact_parks;
  int warned_full;
  int warned_claimed;
  uint64_t ticks, signals, reused, parked, idle_ticks; /* for the debug log */
  /* Drawn threads found in a park credited exactly, and the credits
   * recorded (the debug log). */
  uint64_t exact;
  _Atomic uint64_t credits;
  uint64_t credited_at; /* monotonic: the last round of credits */
  /* The end of the timer's current window: what a tick does takes effect
   * on the exact credit from then on (parked_stack's exact_from). */
  _Atomic uint64_t window_end_ns;
  /* Of the signals, those that found their thread blocked in a system
   * call, and of them in a wait hook (handlers count; the debug log). */
  _Atomic uint64_t signals_blocked, signals_parking;
  /* The least CPU seen between a handler's end and the next signal to a
   * thread that was then blocked at the same stack: the return from our
   * handler to its call (UINT64_MAX: none seen yet). */
  _Atomic uint64_t return_ns;
} wall = {.lock = PTHREAD_MUTEX_INITIALIZER, .return_ns = UINT64_MAX};

/* Async-signal-safe: atomic loads. NULL for an unknown index. */
static wall_slot *slot_at(uint32_t index) {
  if (index >= atomic_load_explicit(&wall.nslots, memory_order_acquire))
    return NULL;
  wall_slot *chunk = atomic_load_explicit(&wall.chunks[index >> CHUNK_BITS],
                                          memory_order_acquire);
  return chunk ? &chunk[index & (CHUNK_SLOTS - 1)] : NULL;
}

/* Async-signal-safe: fills a ring slot with a stack. */
static void emit_stack(cp_ring *ring, const uint64_t *frames, uint32_t n,
                       uint32_t truncated, uint32_t labels, uint64_t span_id,
                       uint64_t local_root_span_id, pid_t tid, int64_t ns,
                       int64_t count) {
  cp_record rec;
  cp_raw_sample *r =
      cp_record_begin_as(&rec, ring, CONTPROF_KIND_WALL, count, ns, tid, labels,
                         span_id, local_root_span_id);
  if (!r)
    return; /* values kept in the ring's dropped totals */
  memcpy(r->frames, frames, n * sizeof *frames);
  cp_record_commit(&rec, n, (int)truncated);
}

/* Async-signal-safe: fills a ring slot with the slot's saved stack. */
static void emit_sample(cp_ring *ring, const wall_slot *s, pid_t tid,
                        int64_t ns, int64_t count) {
  emit_stack(ring, s->frames, s->nframes, s->truncated, s->labels, s->span_id,
             s->local_root_span_id, tid, ns, count);
}

/* --- parked threads --------------------------------------------------- */

/* Async-signal-safe, bounded (the parked stack's depth), no system call:
 * on the slot's own thread, in a wait hook whose frame address is cfa,
 * before it blocks. Whether the slot's parked stack is this thread's stack
 * from the hook outwards: taken at this frame address, and every stack word
 * it came from at or above the hook's return address still holds that
 * return address. The words are read only within the thread's own stack as
 * recorded at its start, which holds cfa (another stack, a coroutine's,
 * is not checked: 0). Returns the parked stack's seq checked against, or
 * 0. The loads are of return addresses, outside AddressSanitizer (as
 * unwind.c's). */
__attribute__((no_sanitize("address"))) static uint32_t
parked_stack_is_mine(const parked_stack *p, uintptr_t cfa, uintptr_t hi) {
  uint32_t seq = atomic_load_explicit(&p->seq, memory_order_relaxed);
  uint32_t n = p->n;
  if (!seq || n < 2 || p->cfa != cfa)
    return 0;
  int has_hook = 0;
  for (uint32_t i = 1; i < n; i++) {
    uintptr_t at = (uintptr_t)p->slots[i];
    if (at < cfa - sizeof(uint64_t))
      continue; /* below the hook: the C library's, not there yet */
    if (at % sizeof(uint64_t) || at >= hi || hi - at < sizeof(uint64_t) ||
        *(const uint64_t *)at != p->frames[i])
      return 0;
    has_hook |= at == cfa - sizeof(uint64_t);
  }
  /* A handler that ran meanwhile (a nested wait hook's) may have taken
   * another stack into this way. */
  atomic_signal_fence(memory_order_acquire);
  if (!has_hook || atomic_load_explicit(&p->seq, memory_order_relaxed) != seq)
    return 0;
  return seq;
}

/* Async-signal-safe, bounded (PARKED_WAYS times the depth), no system
 * call: the first of the slot's parked stacks that is this thread's stack
 * (parked_stack_is_mine). Returns its seq (0: none) and sets *way. */
static uint32_t find_my_parked_stack(wall_slot *s, uintptr_t cfa,
                                     uint32_t *way) {
  uintptr_t lo, hi;
  if (!cp_fpwalk_stack_bounds(&lo, &hi) || cfa <= lo || cfa > hi)
    return 0;
  uint32_t ways = atomic_load_explicit(&s->parked_ways, memory_order_acquire);
  for (uint32_t w = 0; w < ways && w < PARKED_WAYS; w++) {
    uint32_t seq = parked_stack_is_mine(&s->parked[w], cfa, hi);
    if (seq) {
      s->parked[w].used = ++s->parked_clock;
      *way = w;
      return seq;
    }
  }
  return 0;
}

/* Caller: the slot's thread. Publishes cfa (0: none), the parked stack
 * checked against (its way, and its seq then; 0: none), labels and span
 * under the sequence count. */
static void publish_park(wall_slot *s, uintptr_t cfa, uint32_t way,
                         uint32_t checked, uint32_t labels, uint64_t span_id,
                         uint64_t local_root_span_id) {
  uint32_t gen = atomic_load_explicit(&s->park_gen, memory_order_relaxed);
  atomic_store_explicit(&s->park_gen, gen + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&s->park_cfa, cfa, memory_order_relaxed);
  atomic_store_explicit(&s->park_checked, checked, memory_order_relaxed);
  atomic_store_explicit(&s->park_way, way, memory_order_relaxed);
  atomic_store_explicit(&s->park_labels, labels, memory_order_relaxed);
  atomic_store_explicit(&s->park_span_id, span_id, memory_order_relaxed);
  atomic_store_explicit(&s->park_local_root_span_id, local_root_span_id,
                        memory_order_relaxed);
  atomic_store_explicit(&s->park_gen, gen + 2, memory_order_release);
}

/* --- parked time, credited exactly ----------------------------------- */

#define PARK_WAY_MASK ((1u << PARK_WAY_BITS) - 1)

/* Async-signal-safe: ns of wall time as a count of configured intervals,
 * rounded up or down at random so that it is unbiased. */
static int64_t intervals_of(uint64_t ns) {
  uint64_t base = wall.base_interval_ns ? wall.base_interval_ns : 1;
  return (int64_t)(ns / base + (cp_random_below(base) < ns % base));
}

/* Async-signal-safe: takes p's credit_lock if no one holds it (the timer
 * recording, the hook keying, the handler taking a stack). */
static int lock_credit(parked_stack *p) {
  uint32_t unlocked = 0;
  return atomic_compare_exchange_strong_explicit(&p->credit_lock, &unlocked, 1,
                                                 memory_order_acquire,
                                                 memory_order_relaxed);
}

static void unlock_credit(parked_stack *p) {
  atomic_store_explicit(&p->credit_lock, 0, memory_order_release);
}

/* Async-signal-safe: ns of a park on way's stack, credited (the thread as
 * it leaves, or the timer for a park that lasts). */
static void credit_park(wall_slot *s, uint32_t way, uint64_t ns) {
  atomic_fetch_add_explicit(&s->parked[way].credit_ns, ns,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(&s->parked_total_ns, ns, memory_order_release);
}

/* Async-signal-safe: records what p owes (emit_stack) with its stack and
 * key. Caller holds p->credit_lock, and p's stack stands still (the timer
 * with no signal outstanding, or the slot's own handler). */
static void record_credit(cp_ring *ring, parked_stack *p, pid_t tid) {
  uint64_t ns =
      atomic_exchange_explicit(&p->credit_ns, 0, memory_order_relaxed);
  if (!ns || !ring || p->n < 2)
    return;
  emit_stack(ring, p->frames, p->n, p->truncated, p->key_labels, p->key_span_id,
             p->key_local_root_span_id, tid, (int64_t)ns, intervals_of(ns));
  atomic_fetch_add_explicit(&wall.credits, 1, memory_order_relaxed);
}

/* Async-signal-safe, no system call (a vDSO clock read). On the slot's
 * thread as it leaves a wait hook, or enters another one nested in a signal
 * handler: the park in progress, when credited exactly, adds its length to
 * its parked stack's credit. */
static void end_exact_park(wall_slot *s) {
  /* Only this thread (and its handler) makes it nonzero: a zero read here
   * stays zero, and most parks pay a load, not an exchange. */
  if (!atomic_load_explicit(&s->park_from, memory_order_relaxed))
    return;
  uint64_t v = atomic_exchange_explicit(&s->park_from, 0, memory_order_acq_rel);
  if (!v)
    return;
  uint64_t from = v >> PARK_WAY_BITS, now = cp_monotonic_ns();
  if (now > from)
    credit_park(s, v & PARK_WAY_MASK, now - from);
}

/* Async-signal-safe, bounded. Keys parked stack p anew with a park's labels
 * and span, when nothing is owed under its old key and no one records it
 * now. Its parks count from the end of the current window: whether it
 * could be keyed depends on when the last credit was recorded, a tick's
 * doing, and a tick's own window must keep what the tick credited. Returns
 * whether it did. */
static int rekey(parked_stack *p, uint32_t labels, uint64_t span_id,
                 uint64_t local_root_span_id) {
  if (!lock_credit(p))
    return 0;
  int ok = atomic_load_explicit(&p->credit_ns, memory_order_relaxed) == 0;
  if (ok) {
    p->key_labels = labels;
    p->key_span_id = span_id;
    p->key_local_root_span_id = local_root_span_id;
    uint64_t end =
        atomic_load_explicit(&wall.window_end_ns, memory_order_relaxed);
    if (atomic_load_explicit(&p->exact_from, memory_order_relaxed) < end)
      atomic_store_explicit(&p->exact_from, end, memory_order_relaxed);
  }
  unlock_credit(p);
  return ok;
}

/* Async-signal-safe, bounded, no system call (a vDSO clock read). On the
 * slot's thread, in a wait hook that found its parked stack at way: the
 * park is credited exactly when the stack is keyed with the park's labels
 * and span (or can be keyed with them now). */
static void begin_exact_park(wall_slot *s, uint32_t way, uint32_t labels,
                             uint64_t span_id, uint64_t local_root_span_id) {
  parked_stack *p = &s->parked[way];
  if ((p->key_labels != labels || p->key_span_id != span_id ||
       p->key_local_root_span_id != local_root_span_id) &&
      !rekey(p, labels, span_id, local_root_span_id))
    return;
  uint64_t from = cp_monotonic_ns();
  uint64_t exact_from =
      atomic_load_explicit(&p->exact_from, memory_order_relaxed);
  if (from < exact_from)
    from = exact_from;
  atomic_store_explicit(&s->park_from, from << PARK_WAY_BITS | way,
                        memory_order_release);
}

/* With wall.lock held, and the slot's stacks standing still (no signal
 * outstanding, or its thread gone): credits the park in progress up to now
 * and records what every parked stack owes. */
static void credit_slot(cp_ring *ring, wall_slot *s, uint64_t now) {
  pid_t tid = atomic_load(&s->tid);
  uint64_t v = atomic_load_explicit(&s->park_from, memory_order_acquire);
  uint64_t from = v >> PARK_WAY_BITS;
  if (v && from < now &&
      atomic_compare_exchange_strong(
          &s->park_from, &v, now << PARK_WAY_BITS | (v & PARK_WAY_MASK)))
    credit_park(s, v & PARK_WAY_MASK, now - from);
  uint32_t ways = atomic_load_explicit(&s->parked_ways, memory_order_acquire);
  for (uint32_t w = 0; w < ways && w < PARKED_WAYS; w++) {
    parked_stack *p = &s->parked[w];
    if (!atomic_load_explicit(&p->credit_ns, memory_order_relaxed) ||
        !lock_credit(p))
      continue; /* nothing owed, or its thread keys it: next time */
    record_credit(ring, p, tid);
    unlock_credit(p);
  }
}

/* With wall.lock held: credit_slot for every thread with no signal
 * outstanding (only the timer sends one, under the lock; a handler whose
 * signal is outstanding may be taking a stack). */
static void credit_all_locked(void) {
  cp_ring *ring = cp_agg_ring();
  uint64_t now = cp_monotonic_ns();
  for (size_t i = 0; i < wall.nlive; i++) {
    wall_slot *s = slot_at(wall.live[i]);
    if (s && atomic_load(&s->pending_ns) == 0)
      credit_slot(ring, s, now);
  }
  wall.credited_at = now;
}

/* Hot path, async-signal-safe, no system call: see wall.h. Only into the
 * slot that is still this thread's (a slot released at stop or after a fork
 * may belong to another thread by now). Labels, span and the parked stack's
 * check only with a frame address (the tick reads them only then). */
int cp_wall_publish_park(uintptr_t cfa) {
  wall_slot *s = cp_thread.wall_slot;
  if (!s || atomic_load_explicit(&s->tid, memory_order_relaxed) != cp_gettid())
    return 0;
  end_exact_park(s);
  uint32_t labels = 0, checked = 0, way = 0;
  uint64_t span_id = 0, local_root_span_id = 0;
  if (cfa) {
    labels = cp_labels_current();
    cp_trace_current(&span_id, &local_root_span_id);
    checked = find_my_parked_stack(s, cfa, &way);
  }
  publish_park(s, cfa, way, checked, labels, span_id, local_root_span_id);
  if (checked && atomic_load_explicit(&wall.exact_parks, memory_order_relaxed))
    begin_exact_park(s, way, labels, span_id, local_root_span_id);
  return 1;
}

/* Async-signal-safe, bounded: take_parked_stack's part, with
 * p->credit_lock held. */
static int take_into(wall_slot *s, parked_stack *p, uint32_t way, uintptr_t cfa,
                     void *ucontext, size_t max) {
  /* Its buffers are written now: a wait hook's check running under this
   * handler (nested) sees seq move. */
  uint32_t seq = atomic_load_explicit(&p->seq, memory_order_relaxed);
  seq = seq + 1 ? seq + 1 : 1;
  atomic_store_explicit(&p->seq, seq, memory_order_relaxed);
  atomic_signal_fence(memory_order_release);
  p->n = 0;
  int truncated = 0;
  size_t n =
      cp_unwind_signal_slots(ucontext, p->frames, p->slots, max, &truncated);
  if (n == 0)
    return 0;
  /* Usable when every return address was found where a call put it, the
   * hook's own among them (at its frame address less one word). */
  int complete = 1, has_hook = 0;
  for (size_t i = 1; i < n; i++) {
    complete &= p->slots[i] != 0;
    has_hook |= p->slots[i] == cfa - sizeof(uint64_t);
  }
  memcpy(s->frames, p->frames, n * sizeof *s->frames);
  s->nframes = (uint32_t)n;
  s->truncated = (uint32_t)truncated;
  int exact = atomic_load_explicit(&wall.exact_parks, memory_order_relaxed);
  if (complete && has_hook && n > 1) {
    p->cfa = cfa;
    p->truncated = (uint32_t)truncated;
    p->n = (uint32_t)n;
    p->used = ++s->parked_clock;
    /* Taken in this very wait: the next ticks of it reuse it. Published
     * with what the hook published (the thread is blocked under us). */
    uint32_t labels =
        atomic_load_explicit(&s->park_labels, memory_order_relaxed);
    uint64_t span_id =
        atomic_load_explicit(&s->park_span_id, memory_order_relaxed);
    uint64_t local_root_span_id =
        atomic_load_explicit(&s->park_local_root_span_id, memory_order_relaxed);
    publish_park(s, cfa, way, seq, labels, span_id, local_root_span_id);
    /* Keyed with this wait's labels and span; this wait and the next ones
     * here are credited exactly from the end of the window (the signal was
     * a tick's doing, and that tick credited its window). */
    p->key_labels = labels;
    p->key_span_id = span_id;
    p->key_local_root_span_id = local_root_span_id;
    uint64_t end =
        atomic_load_explicit(&wall.window_end_ns, memory_order_relaxed);
    uint64_t now = cp_monotonic_ns();
    uint64_t from = end > now ? end : now;
    atomic_store_explicit(&p->exact_from, from, memory_order_relaxed);
    if (exact)
      atomic_store_explicit(&s->park_from, from << PARK_WAY_BITS | way,
                            memory_order_release);
  }
  return 1;
}

/* Async-signal-safe, in the handler on a thread found blocked in a system
 * call: when that is a wait hook's, takes the stack with the address of
 * each return address into the slot's parked stack, and copies it to the
 * sample's. Returns whether it did (else the caller unwinds as usual). */
static int take_parked_stack(wall_slot *s, void *ucontext, size_t max) {
  uintptr_t cfa = atomic_load_explicit(&s->park_cfa, memory_order_relaxed);
  uint32_t ways = atomic_load_explicit(&s->parked_ways, memory_order_acquire);
  if (!cfa || cp_thread.wall_slot != s || !ways)
    return 0;
  /* In a park credited exactly (the signal was sent before it began): its
   * stack, which the hook checked. */
  uint64_t v = atomic_load_explicit(&s->park_from, memory_order_acquire);
  if (v) {
    const parked_stack *in = &s->parked[v & PARK_WAY_MASK];
    if (in->n < 2)
      return 0;
    memcpy(s->frames, in->frames, in->n * sizeof *s->frames);
    s->nframes = in->n;
    s->truncated = in->truncated;
    return 1;
  }
  /* Into an empty way, else the least recently used one. */
  uint32_t way = 0;
  for (uint32_t w = 0; w < ways && w < PARKED_WAYS; w++) {
    if (!s->parked[w].n) {
      way = w;
      break;
    }
    if (s->parked[w].used < s->parked[way].used)
      way = w;
  }
  parked_stack *p = &s->parked[way];
  /* What it owes is recorded with its old stack first; not while the hook
   * this handler interrupted keys it. */
  if (!lock_credit(p))
    return 0;
  record_credit(cp_agg_ring(), p, cp_gettid());
  int taken = take_into(s, p, way, cfa, ucontext, max);
  unlock_credit(p);
  return taken;
}

/* On the timer thread, with wall.lock held and no signal outstanding for
 * s (so the parked stack stands still): whether the thread is in a wait
 * hook at the frame address of its parked stack, which the hook found to be
 * its stack (parked_stack_is_mine). Then *labels and the span ids are the
 * ones it blocked with. Memory reads only. */
static const parked_stack *still_parked(wall_slot *s, uint32_t *labels,
                                        uint64_t *span_id,
                                        uint64_t *local_root_span_id) {
  uint32_t gen = atomic_load_explicit(&s->park_gen, memory_order_acquire);
  uint32_t way = atomic_load_explicit(&s->park_way, memory_order_relaxed);
  if ((gen & 1) || way >= PARKED_WAYS ||
      way >= atomic_load_explicit(&s->parked_ways, memory_order_acquire))
    return NULL;
  const parked_stack *p = &s->parked[way];
  uint32_t seq = atomic_load_explicit(&p->seq, memory_order_relaxed);
  if (p->n < 2 || !seq ||
      atomic_load_explicit(&s->park_cfa, memory_order_relaxed) != p->cfa ||
      atomic_load_explicit(&s->park_checked, memory_order_relaxed) != seq)
    return NULL;
  *labels = atomic_load_explicit(&s->park_labels, memory_order_relaxed);
  *span_id = atomic_load_explicit(&s->park_span_id, memory_order_relaxed);
  *local_root_span_id =
      atomic_load_explicit(&s->park_local_root_span_id, memory_order_relaxed);
  atomic_thread_fence(memory_order_acquire);
  return atomic_load_explicit(&s->park_gen, memory_order_relaxed) == gen ? p
                                                                         : NULL;
}

/* Async-signal-safe: one clock read. The signal cut short the system call
 * its thread was blocked in (cp_signal_cut_call), and the timer read the
 * thread's CPU clock just before sending it: the CPU the thread used since
 * is the kernel's work to wake it and deliver the signal (on this VM 100-500
 * us, far more than the handler itself: docs/overhead.md). It is counted as the
 * wall sampler's cost, so that profiler_overhead_pct and the cap see it. The
 * way back (sigreturn, the call restarted, the thread blocked again) costs
 * about as much again and is not measured: the figure is a lower bound. */
static void wakeup_cost(uint64_t sent_cpu_ns) {
  uint64_t now = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
  if (now > sent_cpu_ns && now - sent_cpu_ns < WAKEUP_MAX_NS)
    cp_stats_add_hook_ns(CONTPROF_KIND_WALL,
                         (now - sent_cpu_ns) * WAKEUP_TIMED_EVERY);
}

/* Async-signal-safe: runs in the wall signal handler on the drawn thread.
 * Unwinds into the thread's own preallocated slot, then copies the stack
 * into a ring slot; no locks, no allocation. */
/* Async-signal-safe, bounded (the stack's depth): a hash of the slot's
 * stack. */
static uint64_t stack_hash(const wall_slot *s) {
  uint64_t h = 0xcbf29ce484222325ull ^ s->nframes;
  for (uint32_t i = 0; i < s->nframes; i++)
    h = (h ^ s->frames[i]) * 0x100000001b3ull;
  return h ? h : 1;
}

/* Async-signal-safe, in the handler, after the stack was taken. When the
 * thread is blocked in a system call at the very stack it was blocked at
 * last time (old_hash), the CPU it used between that handler's end and this
 * signal was the return to its call, or work that brought it back there:
 * the least such figure over all threads is this machine's cost of the
 * return, which the "still blocked" rule must allow for (on this VM 2-5
 * us; a machine where it passed 10 us signalled every blocked thread at
 * every tick, and idle windows never began). */
static void learn_return_cost(wall_slot *s, uint64_t old_hash) {
  uint64_t delta =
      atomic_exchange_explicit(&s->signal_delta_ns, 0, memory_order_relaxed);
  if (!s->in_syscall)
    return;
  s->stack_hash = stack_hash(s);
  if (!old_hash || old_hash != s->stack_hash || !delta)
    return;
  uint64_t seen = atomic_load_explicit(&wall.return_ns, memory_order_relaxed);
  while (delta < seen && !atomic_compare_exchange_weak_explicit(
                             &wall.return_ns, &seen, delta,
                             memory_order_relaxed, memory_order_relaxed))
    ;
}

/* The "still blocked" allowance in force (see IDLE_CPU_NS). */
static uint64_t idle_cpu_ns(void) {
  uint64_t r = atomic_load_explicit(&wall.return_ns, memory_order_relaxed);
  if (r == UINT64_MAX || 2 * r <= IDLE_CPU_NS)
    return IDLE_CPU_NS;
  return 2 * r < IDLE_CPU_MAX_NS ? 2 * r : IDLE_CPU_MAX_NS;
}

CP_PASSTHROUGH static void wall_signal_handler(int sig, siginfo_t *info,
                                               void *ucontext) {
  if (cp_thread.calibrating && cp_kernel_cost_take(sig, info))
    return;
  int saved_errno = errno;
  uint64_t began = cp_stats_hook_begin(CONTPROF_KIND_WALL);
  uint64_t value = (uint64_t)(uintptr_t)info->si_value.sival_ptr;
  if (info->si_code != SI_QUEUE || (value >> 32) != WALL_COOKIE ||
      info->si_pid != atomic_load_explicit(&wall.pid, memory_order_relaxed)) {
    cp_signal_chain(sig, info, ucontext);
    errno = saved_errno;
    return;
  }
  int in_syscall = cp_signal_in_syscall(ucontext);
  /* Whether it woke the thread from a call it blocked in; not one taken as
   * a call that ran to its end returned (a busy server's writev): the CPU
   * the thread used since the timer's reading was the rest of that call. */
  int cut = in_syscall && cp_signal_cut_call(ucontext);
  /* The kernel's side of a signal that found its thread running (timed
   * ones count for the calls they stand for): delivery and sigreturn, as
   * measured (kernel_cost.h). One that found it blocked woke it, and the
   * wakeup is counted by wakeup_cost. */
  if (began && !cut)
    cp_stats_count_signals(CONTPROF_KIND_WALL, CP_SIGNAL_QUEUED,
                           cp_stats_hook_weight(CONTPROF_KIND_WALL));
  wall_slot *s = slot_at((uint32_t)value);
  pid_t tid = cp_gettid();
  if (!s || atomic_load_explicit(&s->tid, memory_order_acquire) != tid ||
      atomic_load_explicit(&s->pending_ns, memory_order_acquire) <= 0) {
    if (in_syscall)
      cp_signal_interrupted_call(ucontext);
    errno = saved_errno; /* a thread that ended, or nothing owed */
    return;
  }
  /* The wait hooks publish into this slot from now on. */
  cp_thread.wall_slot = s;
  uint64_t sent =
      atomic_exchange_explicit(&s->sent_cpu_ns, 0, memory_order_relaxed);
  if (sent && cut)
    wakeup_cost(sent);
  cp_ring *ring = cp_agg_ring();
  int nested = cp_thread.in_handler;
  int usable = ring && !nested &&
               atomic_load_explicit(&wall.active, memory_order_relaxed);
  if (usable) {
    cp_thread.in_handler = 1;
    size_t max = atomic_load_explicit(&wall.max_frames, memory_order_relaxed);
    if (max + CP_UNWIND_SLACK > s->frames_cap)
      max = s->frames_cap - CP_UNWIND_SLACK;
    int truncated = 0;
    /* Only a thread caught running (twice: see unwind.c) builds
     * libunwind's per-thread cache (256 KiB); one caught blocked in a
     * system call, as idle threads are, steps from the ucontext instead,
     * which needs no cache. */
    uint64_t old_hash = s->have_stack && s->in_syscall ? s->stack_hash : 0;
    s->in_syscall = in_syscall;
    if (in_syscall)
      atomic_fetch_add_explicit(&wall.signals_blocked, 1, memory_order_relaxed);
    if (in_syscall && take_parked_stack(s, ucontext, max)) {
      atomic_fetch_add_explicit(&wall.signals_parking, 1, memory_order_relaxed);
    } else {
      s->nframes = (uint32_t)cp_unwind_signal(ucontext, s->frames, max,
                                              !s->in_syscall, &truncated);
      s->truncated = (uint32_t)truncated;
    }
    s->labels = cp_labels_current();
    cp_trace_current(&s->span_id, &s->local_root_span_id);
    s->have_stack = 1;
    learn_return_cost(s, old_hash);
  }
  for (;;) {
    int64_t ns = atomic_load_explicit(&s->pending_ns, memory_order_acquire);
    int64_t count =
        atomic_load_explicit(&s->pending_count, memory_order_relaxed);
    if (usable)
      emit_sample(ring, s, tid, ns, count);
    else if (ring)
      cp_record_drop(ring, CONTPROF_KIND_WALL, count, ns);
    atomic_fetch_sub_explicit(&s->pending_count, count, memory_order_relaxed);
    /* Only a stack taken in a system call is ever reused (a system call
     * of its own: a thread's CPU clock is not in the vDSO). */
    if (usable && s->in_syscall) {
      s->stack_cpu_ns = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
      s->stack_park_gen =
          atomic_load_explicit(&s->park_gen, memory_order_relaxed);
    }
    /* Releases the slot to the timer thread unless it added more weight
     * meanwhile: then that is recorded too, with the same stack. */
    if (atomic_fetch_sub_explicit(&s->pending_ns, ns, memory_order_acq_rel) ==
        ns)
      break;
  }
  if (usable)
    cp_thread.in_handler = 0;
  /* Last: an application signal sent while this handler ran is pending by
   * now (signals.h). */
  if (in_syscall)
    cp_signal_interrupted_call(ucontext);
  cp_stats_hook_end(CONTPROF_KIND_WALL, began);
  errno = saved_errno;
}

static int thread_cpu_ns(clockid_t clock, uint64_t *ns) {
  struct timespec ts;
  if (clock_gettime(clock, &ts) != 0)
    return -1;
  *ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  return 0;
}

static int send_wall_signal(pid_t tid, uint32_t index) {
  siginfo_t info;
  memset(&info, 0, sizeof info);
  info.si_signo = wall.signal;
  info.si_code = SI_QUEUE;
  info.si_pid = wall.pid;
  info.si_uid = wall.uid;
  info.si_value.sival_ptr = (void *)(uintptr_t)((WALL_COOKIE << 32) | index);
  return (int)syscall(SYS_rt_tgsigqueueinfo, wall.pid, tid, wall.signal, &info);
}

/* On the timer thread, with wall.lock held, about to signal s's thread:
 * when it is blocked in a wait hook elsewhere than where its first parked
 * stack was taken, it waits in more than one place, and gets the buffers
 * of PARKED_WAYS - 1 more parked stacks (one block, never freed: a handler
 * may be writing into it; 2 x (max_frames + 16) x 8 bytes each). Memory
 * is spent only on the threads that need it; without, one way serves. */
static void ensure_parked_ways(wall_slot *s) {
  if (atomic_load_explicit(&s->parked_ways, memory_order_relaxed) != 1 ||
      s->parked[0].n < 2 || !atomic_load(&s->park_cfa))
    return;
  size_t cap = s->frames_cap;
  uint64_t *block = calloc(2 * cap * (PARKED_WAYS - 1), sizeof *block);
  if (!block)
    return;
  for (int w = 1; w < PARKED_WAYS; w++) {
    s->parked[w].frames = block + 2 * cap * (size_t)(w - 1);
    s->parked[w].slots = s->parked[w].frames + cap;
    s->parked[w].n = 0;
  }
  atomic_store_explicit(&s->parked_ways, PARKED_WAYS, memory_order_release);
}

/* The time the slot's thread parked in parks credited exactly, up to now:
 * those that ended, and the one in progress. (Read while the thread may
 * end a park: the next reading makes up for a park counted twice or not
 * at all.) */
static uint64_t parked_until(wall_slot *s, uint64_t now) {
  uint64_t total =
      atomic_load_explicit(&s->parked_total_ns, memory_order_acquire);
  uint64_t v = atomic_load_explicit(&s->park_from, memory_order_acquire);
  uint64_t from = v >> PARK_WAY_BITS;
  return total + (v && from < now ? now - from : 0);
}

/* With wall.lock held: the slot's thread's wall time since it was last
 * drawn (or announced) that no park credited exactly accounts for, with
 * what was owed to it before; resets the owed amount to 0. */
static int64_t take_owed(wall_slot *s, uint64_t now) {
  uint64_t parked = parked_until(s, now);
  int64_t owed = s->owed_ns + (int64_t)(now - s->acct_ns) -
                 (int64_t)(parked - s->acct_parked_ns);
  s->acct_ns = now;
  s->acct_parked_ns = parked;
  s->owed_ns = 0;
  return owed;
}

/* One tick for a window of window_ns: draw k of the n threads (a partial
 * Fisher-Yates shuffle of live[], so each thread is drawn with probability
 * k/n) and credit each drawn one its time since it was last drawn, less its
 * parks credited exactly (take_owed). Returns whether every thread was
 * drawn and found still blocked where its last stack was taken or in a
 * park credited exactly (no signal sent or outstanding). Caller holds
 * wall.lock. */
static int wall_tick_locked(uint64_t window_ns) {
  size_t n = wall.nlive;
  cp_ring *ring = cp_agg_ring();
  if (n == 0 || !ring)
    return 1;
  size_t k = n < wall.per_tick ? n : wall.per_tick;
  for (size_t i = 0; i < k; i++) {
    size_t j = i + (size_t)cp_random_below(n - i);
    uint32_t t = wall.live[i];
    wall.live[i] = wall.live[j];
    wall.live[j] = t;
  }
  int idle = k == n;
  uint64_t idle_ns = idle_cpu_ns();
  /* A parked thread may have run a little since the last tick and still
   * count as idle for the windows: its stack is the parked one at every
   * tick (PARKED_IDLE_SHARE). */
  uint64_t parked_idle_ns = window_ns / PARKED_IDLE_SHARE;
  if (parked_idle_ns < idle_ns)
    parked_idle_ns = idle_ns;
  uint64_t now = cp_monotonic_ns();
  wall.ticks++;
  for (size_t i = 0; i < k; i++) {
    uint32_t index = wall.live[i];
    wall_slot *s = slot_at(index);
    /* Its time since it was last drawn, less its parks credited exactly:
     * owed to where it is now, unless it is in such a park now (then owed
     * to where the next tick that finds it elsewhere finds it). */
    uint64_t from = atomic_load_explicit(&s->park_from, memory_order_acquire);
    int64_t weight_ns = take_owed(s, now);
    if (from && from >> PARK_WAY_BITS <= now) {
      wall.exact++;
      s->owed_ns = weight_ns;
      continue;
    }
    if (weight_ns <= 0) {
      s->owed_ns = weight_ns; /* its parks' time ran ahead of the clock */
      idle = 0;
      continue;
    }
    int64_t count = intervals_of((uint64_t)weight_ns);
    int64_t prev = atomic_fetch_add(&s->pending_ns, weight_ns);
    atomic_fetch_add(&s->pending_count, count);
    if (prev > 0) {
      idle = 0;
      continue; /* a signal is outstanding: its handler takes this too */
    }
    if (prev < 0) /* a handler that outlived its thread's slot */
      atomic_store(&s->pending_ns, weight_ns);
    pid_t tid = atomic_load(&s->tid);
    uint64_t cpu = 0;
    int have_cpu =
        s->have_stack && s->in_syscall && thread_cpu_ns(s->clock, &cpu) == 0;
    if (have_cpu && cpu - s->stack_cpu_ns <= idle_ns &&
        atomic_load_explicit(&s->park_gen, memory_order_acquire) ==
            s->stack_park_gen) {
      /* Still blocked where it was: record that stack again. */
      emit_sample(ring, s, tid, atomic_exchange(&s->pending_ns, 0),
                  atomic_exchange(&s->pending_count, 0));
      wall.reused++;
      continue;
    }
    uint32_t labels;
    uint64_t span_id, local_root_span_id;
    uint64_t last_parked_cpu = s->parked_tick_cpu_ns;
    s->parked_tick_cpu_ns = 0;
    const parked_stack *parked =
        still_parked(s, &labels, &span_id, &local_root_span_id);
    if (parked) {
      /* It ran since its last stack, and blocked again where its parked
       * stack was taken. Idle all the same if it has not run since the
       * last tick that found it so: the rule above, measured from its last
       * signal, would never apply again to a thread whose handler's tail
       * and return took more than the allowance once, as the parked stack
       * spares it every signal. */
      if (have_cpu || thread_cpu_ns(s->clock, &cpu) == 0) {
        if (!last_parked_cpu || cpu - last_parked_cpu > parked_idle_ns)
          idle = 0;
        s->parked_tick_cpu_ns = cpu ? cpu : 1;
      } else {
        idle = 0;
      }
      emit_stack(ring, parked->frames, parked->n, parked->truncated, labels,
                 span_id, local_root_span_id, tid,
                 atomic_exchange(&s->pending_ns, 0),
                 atomic_exchange(&s->pending_count, 0));
      wall.parked++;
      continue;
    }
    idle = 0;
    ensure_parked_ways(s);
    int timed = cp_random_below(WAKEUP_TIMED_EVERY) == 0 &&
                (have_cpu || thread_cpu_ns(s->clock, &cpu) == 0) && cpu > 0;
    atomic_store_explicit(&s->sent_cpu_ns, timed ? cpu : 0,
                          memory_order_relaxed);
    atomic_store_explicit(&s->signal_delta_ns,
                          have_cpu ? cpu - s->stack_cpu_ns : 0,
                          memory_order_relaxed);
    if (send_wall_signal(tid, index) == 0) {
      wall.signals++;
      continue;
    }
    atomic_store_explicit(&s->sent_cpu_ns, 0, memory_order_relaxed);
    /* ESRCH: the thread ended (its exit comes soon); EAGAIN: the queue of
     * signals is full. Either way nothing will take the weight. */
    int full = errno == EAGAIN;
    int64_t owed_ns = atomic_exchange(&s->pending_ns, 0);
    int64_t owed_count = atomic_exchange(&s->pending_count, 0);
    if (full)
      cp_record_drop(ring, CONTPROF_KIND_WALL, owed_count, owed_ns);
  }
  return idle;
}

/* Caller holds wall.lock. The application installed its own handler for
 * our signal (SIGVTALRM, most often): one it directs at a thread while ours
 * is pending there would merge with ours. Wall signals move to a real-time
 * signal, which queues; the old one keeps our handler, which passes the
 * application's signals on. */
static void move_to_rt_signal(void) {
  int sig = cp_signal_move_to_rt(wall.signal, wall_signal_handler, "wall",
                                 &wall.warned_claimed);
  if (sig < 0)
    return;
  cp_kernel_cost_signal_moved(wall.signal, sig);
  wall.signal = sig;
  cp_threads_set_sampling_signal(sig);
}

/* Started with cp_start_joined_thread: already marked as the profiler's
 * own (never sampled, never announced to the samplers). */
static void *wall_timer_thread(void *arg) {
  (void)arg;
  cp_stats_thread_works_for(CONTPROF_KIND_WALL);
  uint64_t start = cp_monotonic_ns(); /* of the next window */
  unsigned windows = 1;               /* its length, in intervals */
  pthread_mutex_lock(&wall.lock);
  while (!wall.stop) {
    uint64_t now = cp_monotonic_ns();
    /* A timer thread that could not run for more than a window (a starved
     * machine) credits the time it missed with the next window, whose tick
     * falls in what is still to come. */
    uint64_t missed = now > start ? now - start : 0;
    uint64_t ahead = wall.interval_ns * windows;
    uint64_t tick_ns = start + missed + cp_random_below(ahead);
    atomic_store_explicit(&wall.window_end_ns, start + missed + ahead,
                          memory_order_relaxed);
    struct timespec deadline = {(time_t)(tick_ns / 1000000000ull),
                                (long)(tick_ns % 1000000000ull)};
    while (!wall.stop && cp_monotonic_ns() < tick_ns)
      pthread_cond_timedwait(&wall.wake, &wall.lock, &deadline);
    if (wall.stop)
      break;
    if (cp_agg_deferred()) {
      /* A child of fork's drain thread: due after a second, or now when
       * it has a second thread (named while it lives) or a quarter-full
       * ring. Started unlocked: the new thread's ticks take wall.lock. */
      int now = wall.nlive > 1;
      pthread_mutex_unlock(&wall.lock);
      cp_agg_start_deferred(now);
      pthread_mutex_lock(&wall.lock);
      if (wall.stop)
        break;
    }
    uint64_t window_ns = missed + ahead;
    if (cp_signal_claimed(wall.signal) && !wall.warned_claimed)
      move_to_rt_signal();
    int idle = wall_tick_locked(window_ns);
    if (cp_monotonic_ns() - wall.credited_at >= CREDIT_EVERY_NS)
      credit_all_locked();
    wall.idle_ticks += windows > 1;
    start += window_ns;
    windows =
        idle ? (windows * 2 > IDLE_WINDOWS_MAX ? IDLE_WINDOWS_MAX : windows * 2)
             : 1;
  }
  pthread_mutex_unlock(&wall.lock);
  return NULL;
}

/* A slot given to a new thread, freed, or freed in a fork's child: nothing
 * owed, no stack, no park. Its tid is the caller's to set. */
static void forget_thread(wall_slot *s) {
  atomic_store(&s->pending_ns, 0);
  atomic_store(&s->pending_count, 0);
  s->have_stack = 0;
  s->nframes = 0;
  for (int w = 0; w < PARKED_WAYS; w++) {
    parked_stack *p = &s->parked[w];
    p->n = 0;
    atomic_store(&p->credit_ns, 0);
    atomic_store(&p->credit_lock, 0);
    atomic_store(&p->exact_from, 0);
    p->key_labels = 0;
    p->key_span_id = p->key_local_root_span_id = 0;
  }
  s->parked_tick_cpu_ns = 0;
  atomic_store(&s->park_cfa, 0);
  atomic_store(&s->park_checked, 0);
  atomic_store(&s->park_from, 0);
  atomic_store(&s->parked_total_ns, 0);
  s->acct_ns = cp_monotonic_ns();
  s->acct_parked_ns = 0;
  s->owed_ns = 0;
}

static void wall_thread_started(pid_t tid) {
  pthread_mutex_lock(&wall.lock);
  if (!wall.live || wall.nlive == MAX_THREADS) {
    if (wall.live && !wall.warned_full++)
      cp_warn("more than %u threads: the rest are not wall-sampled",
              MAX_THREADS);
    pthread_mutex_unlock(&wall.lock);
    return;
  }
  uint32_t index;
  if (wall.nfree) {
    index = wall.free_slots[--wall.nfree];
  } else {
    index = atomic_load(&wall.nslots);
    if (!wall.chunks[index >> CHUNK_BITS]) {
      wall_slot *chunk = calloc(CHUNK_SLOTS, sizeof *chunk);
      if (!chunk) {
        pthread_mutex_unlock(&wall.lock);
        return;
      }
      atomic_store_explicit(&wall.chunks[index >> CHUNK_BITS], chunk,
                            memory_order_release);
    }
    atomic_store_explicit(&wall.nslots, index + 1, memory_order_release);
  }
  wall_slot *s = slot_at(index);
  size_t need = atomic_load(&wall.max_frames) + CP_UNWIND_SLACK;
  if (s->frames_cap < need) {
    /* A larger max_frames after a restart. The old buffers are abandoned,
     * not freed: a late handler may still be writing into them. One block:
     * the sample's stack, the parked stack and its stack-word addresses. */
    uint64_t *frames = calloc(3 * need, sizeof *frames);
    if (!frames) {
      wall.free_slots[wall.nfree++] = index;
      pthread_mutex_unlock(&wall.lock);
      return;
    }
    s->frames = frames;
    s->parked[0].frames = frames + need;
    s->parked[0].slots = frames + 2 * need;
    /* The other ways' buffers, if any, are for the old size: given anew
     * when needed. */
    atomic_store_explicit(&s->parked_ways, 1, memory_order_release);
    s->frames_cap = need;
  }
  forget_thread(s);
  s->clock =
      (clockid_t)((~(unsigned)tid << 3) | CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD);
  atomic_store_explicit(&s->tid, tid, memory_order_release);
  wall.live[wall.nlive++] = index;
  pthread_mutex_unlock(&wall.lock);
}

/* Caller holds wall.lock. */
static void release_live_locked(size_t i) {
  wall_slot *s = slot_at(wall.live[i]);
  atomic_store_explicit(&s->tid, 0, memory_order_release);
  forget_thread(s);
  wall.free_slots[wall.nfree++] = wall.live[i];
  wall.live[i] = wall.live[--wall.nlive];
}

/* With wall.lock held, as the slot's thread ends or the sampler stops, and
 * no handler runs on it: its time since it was last drawn, less its parks
 * credited exactly, and what a signal that never came owed, go to the stack
 * it was last drawn with. Without this the tail of every thread's life was
 * lost: a thread that parks 91% of its time is drawn by the ticks that find
 * it running, and under load those came seldom (a tenth of its running
 * time lost at its end). A thread never drawn but in its parks has no
 * stack for it: nothing is recorded. */
static void credit_owed(cp_ring *ring, wall_slot *s, uint64_t now) {
  int64_t owed = take_owed(s, now) + atomic_exchange(&s->pending_ns, 0);
  atomic_store(&s->pending_count, 0);
  if (owed > 0 && ring && s->have_stack && s->nframes > 0)
    emit_sample(ring, s, atomic_load(&s->tid), owed,
                intervals_of((uint64_t)owed));
}

/* Called on the thread as it ends, or on the profiler's thread once it is
 * gone: no handler runs on it, and what its parks owe is recorded. */
static void wall_thread_exited(pid_t tid) {
  pthread_mutex_lock(&wall.lock);
  for (size_t i = 0; i < wall.nlive; i++)
    if (atomic_load(&slot_at(wall.live[i])->tid) == tid) {
      uint64_t now = cp_monotonic_ns();
      credit_slot(cp_agg_ring(), slot_at(wall.live[i]), now);
      /* Only on the thread itself: one found gone by a rescan ended at a
       * time not known. */
      if (atomic_load(&wall.active) && cp_gettid() == tid)
        credit_owed(cp_agg_ring(), slot_at(wall.live[i]), now);
      release_live_locked(i);
      break;
    }
  pthread_mutex_unlock(&wall.lock);
}

static int wall_start(const cp_config *cfg) {
  pthread_mutex_lock(&wall.lock);
  if (!wall.live) {
    wall.live = calloc(MAX_THREADS, sizeof *wall.live);
    wall.free_slots = calloc(MAX_THREADS, sizeof *wall.free_slots);
    if (!wall.live || !wall.free_slots) {
      free(wall.live);
      free(wall.free_slots);
      wall.live = wall.free_slots = NULL;
      pthread_mutex_unlock(&wall.lock);
      return CONTPROF_ERR_NOMEM;
    }
  }
  wall.base_interval_ns = (uint64_t)cfg->wall_interval_ms * 1000000ull;
  wall.interval_ns = wall.base_interval_ns;
  wall.per_tick = (size_t)cfg->wall_threads_per_tick;
  atomic_store(&wall.exact_parks, !cfg->timeline);
  atomic_store(&wall.max_frames, (size_t)cfg->max_frames);
  atomic_store(&wall.pid, getpid());
  wall.uid = getuid();
  wall.stop = 0;
  wall.warned_full = 0;
  wall.warned_claimed = 0;
  wall.ticks = wall.signals = wall.reused = wall.parked = wall.idle_ticks = 0;
  wall.exact = 0;
  atomic_store(&wall.credits, 0);
  wall.credited_at = cp_monotonic_ns();
  atomic_store(&wall.window_end_ns, 0);
  atomic_store(&wall.signals_blocked, 0);
  atomic_store(&wall.signals_parking, 0);
  pthread_mutex_unlock(&wall.lock);

  cp_unwind_init();
  int sig = cp_signal_install(SIGVTALRM, wall_signal_handler);
  if (sig < 0)
    return CONTPROF_ERR_SYSTEM;
  wall.signal = sig;
  cp_threads_set_sampling_signal(sig);
  cp_kernel_cost_use(sig, -1, cfg->kernel_cost_after_ms);

  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&wall.wake, &attr);
  pthread_condattr_destroy(&attr);
  atomic_store(&wall.active, 1);
  /* The timer thread blocks every signal: it is never sampled. */
  int rc = cp_start_joined_thread(&wall.thread, wall_timer_thread, NULL,
                                  "contprof-wall");
  if (rc != 0) {
    atomic_store(&wall.active, 0);
    cp_error("cannot start the wall-clock timer thread: %s", strerror(rc));
    return CONTPROF_ERR_SYSTEM;
  }
  wall.thread_running = 1;
  return 0;
}

static void wall_stop(void) {
  atomic_store(&wall.active, 0);
  if (wall.thread_running) {
    pthread_mutex_lock(&wall.lock);
    wall.stop = 1;
    pthread_cond_signal(&wall.wake);
    pthread_mutex_unlock(&wall.lock);
    cp_join_thread(wall.thread);
    wall.thread_running = 0;
  }
  pthread_mutex_lock(&wall.lock);
  credit_all_locked();
  /* And the time since each thread was last drawn, where no signal is
   * outstanding (its handler may be taking a stack). */
  uint64_t now = cp_monotonic_ns();
  for (size_t i = 0; i < wall.nlive; i++) {
    wall_slot *s = slot_at(wall.live[i]);
    if (atomic_load(&s->pending_ns) == 0)
      credit_owed(cp_agg_ring(), s, now);
  }
  cp_debug("wall sampler: %llu ticks (%llu of them over idle windows), %llu "
           "signals (%llu found their thread blocked, %llu of them in a wait "
           "hook), %llu stacks reused, %llu parked stacks reused, %llu "
           "threads drawn in a park credited exactly, %llu credits of parked "
           "time; blocked threads may use %llu us of CPU and stay still",
           (unsigned long long)wall.ticks, (unsigned long long)wall.idle_ticks,
           (unsigned long long)wall.signals,
           (unsigned long long)atomic_load(&wall.signals_blocked),
           (unsigned long long)atomic_load(&wall.signals_parking),
           (unsigned long long)wall.reused, (unsigned long long)wall.parked,
           (unsigned long long)wall.exact,
           (unsigned long long)atomic_load(&wall.credits),
           (unsigned long long)(idle_cpu_ns() / 1000));
  while (wall.nlive)
    release_live_locked(wall.nlive - 1);
  pthread_mutex_unlock(&wall.lock);
}

static void wall_after_fork_child(void) {
  /* Only the forking thread exists: the timer thread and every slot's
   * thread are gone. No lock is taken (a lost thread may hold it). */
  pthread_mutex_init(&wall.lock, NULL);
  atomic_store(&wall.active, 0);
  wall.thread_running = 0;
  wall.nlive = 0;
  wall.nfree = 0;
  uint32_t n = atomic_load(&wall.nslots);
  for (uint32_t i = 0; i < n; i++) {
    wall_slot *s = slot_at(i);
    atomic_store(&s->tid, 0);
    forget_thread(s);
    if (wall.free_slots)
      wall.free_slots[wall.nfree++] = i;
  }
}

/* On the scheduler's thread as a period closes: what the parks owe goes
 * into the period. */
static void wall_before_close(void) {
  pthread_mutex_lock(&wall.lock);
  if (atomic_load(&wall.active))
    credit_all_locked();
  pthread_mutex_unlock(&wall.lock);
}

/* On the profiler's thread: ticks factor x the configured interval apart
 * (each credits a drawn thread its time since it was last drawn, whatever
 * the interval). */
static void wall_slow_down(unsigned factor) {
  pthread_mutex_lock(&wall.lock);
  wall.interval_ns = wall.base_interval_ns * factor;
  pthread_mutex_unlock(&wall.lock);
}

const cp_sampler cp_wall_sampler = {
    .name = "wall",
    .profile = CP_PROFILE_WALL,
    .start = wall_start,
    .stop = wall_stop,
    .thread_started = wall_thread_started,
    .thread_exited = wall_thread_exited,
    .after_fork_child = wall_after_fork_child,
    .before_close = wall_before_close,
    .slow_down = wall_slow_down,
};
