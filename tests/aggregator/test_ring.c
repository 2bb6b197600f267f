/* Multi-producer stress test of the sample ring (src/aggregator/ring.c)
 * through the one record entry point (src/record.h): several threads and a
 * signal handler interrupting them (a tgkill storm) produce at once into a
 * small ring while one consumer drains it. Every sample carries its stream
 * (thread or that thread's handler), a sequence number and a checksum over
 * its frames, written last before the commit. Checked: each committed
 * sample is read exactly once, in its stream's order, intact; the ring
 * never shows a slot before its commit; what was dropped is counted exactly
 * (per kind, produced = consumed + dropped, in samples, counts and
 * quantities); and the child of a fork in the middle of it all starts with
 * an empty ring it can fill. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "aggregator/ring.h"
#include "samplers/record.h"
#include "test.h"

#define PRODUCERS 4
#define STREAMS (2 * PRODUCERS) /* each producer thread, then its handler */
#define RING_SLOTS 64
#define MAX_FRAMES 16
#if CP_TEST_SANITIZED
#define PER_STREAM 20000
#else
#define PER_STREAM 100000
#endif

static cp_ring *ring;
static _Atomic int producers_left;
static _Atomic int storm_over; /* no signal comes any more */
static _Atomic pid_t producer_tids[PRODUCERS];

/* What each stream tried, and which of its sequence numbers the ring
 * refused: written by the stream only, read after the joins. */
static struct stream {
  uint64_t attempts;
  int64_t dropped_count[CONTPROF_KIND_COUNT];
  int64_t dropped_quantity[CONTPROF_KIND_COUNT];
  int64_t produced_count[CONTPROF_KIND_COUNT];
  int64_t produced_quantity[CONTPROF_KIND_COUNT];
  uint64_t dropped_samples[CONTPROF_KIND_COUNT];
  uint8_t dropped[PER_STREAM / 8];
} streams[STREAMS];

/* What the consumer read, per stream. */
static struct seen {
  uint64_t next_min; /* sequence numbers only go up */
  uint8_t bits[PER_STREAM / 8];
} seen[STREAMS];

static CP_TLS int my_producer = -1; /* the thread's index, -1: not one */

/* A stream's sample seq: its kind, values and stack, all derived from the
 * two numbers so that the consumer can tell a torn one. */
static contprof_sample_kind kind_of(int stream, uint64_t seq) {
  if (stream >= PRODUCERS)
    return CONTPROF_KIND_WALL; /* the handlers' */
  static const contprof_sample_kind k[] = {
      CONTPROF_KIND_CPU, CONTPROF_KIND_ALLOC, CONTPROF_KIND_LOCK,
      CONTPROF_KIND_INUSE};
  return k[(seq + (uint64_t)stream) % 4];
}
static int64_t count_of(int stream, uint64_t seq) {
  return 1 + (int64_t)((seq * 7 + (uint64_t)stream) % 13);
}
static int64_t quantity_of(int stream, uint64_t seq) {
  return (int64_t)(seq * 1000 + (uint64_t)stream * 17 + 3);
}
static size_t nframes_of(int stream, uint64_t seq) {
  return 1 + (size_t)((seq + (uint64_t)stream * 3) % MAX_FRAMES);
}
static uint64_t frame_of(int stream, uint64_t seq, size_t i) {
  uint64_t x = (seq << 20) ^ ((uint64_t)stream << 56) ^ (i * 0x9e3779b9ull);
  return x * 0xbf58476d1ce4e5b9ull;
}
static uint32_t checksum(const cp_raw_sample *s) {
  uint64_t h = s->kind * 31 + (uint64_t)s->tid;
  h = h * 1000003 ^ s->span_id;
  h = h * 1000003 ^ (uint64_t)s->count;
  h = h * 1000003 ^ (uint64_t)s->quantity;
  h = h * 1000003 ^ s->nframes;
  for (uint32_t i = 0; i < s->nframes && i < MAX_FRAMES; i++)
    h = h * 1000003 ^ s->frames[i];
  return (uint32_t)(h ^ (h >> 32)) | 1; /* never 0, the "not yet" mark */
}

/* Async-signal-safe (the handler calls it too): produces sample seq of
 * stream, or counts it as the ring's drop. */
static void produce(int stream, uint64_t seq) {
  struct stream *st = &streams[stream];
  contprof_sample_kind kind = kind_of(stream, seq);
  int64_t count = count_of(stream, seq), quantity = quantity_of(stream, seq);
  st->attempts = seq + 1;
  st->produced_count[kind] += count;
  st->produced_quantity[kind] += quantity;
  cp_record rec;
  cp_raw_sample *s = cp_record_begin_as(&rec, ring, kind, count, quantity,
                                        (pid_t)stream, 0, seq, 0);
  if (!s) {
    st->dropped[seq / 8] |= (uint8_t)(1u << (seq % 8));
    st->dropped_count[kind] += count;
    st->dropped_quantity[kind] += quantity;
    st->dropped_samples[kind]++;
    return;
  }
  /* The checksum goes in last: a slot read before its commit shows 0 or
   * the checksum of the sample it held before. */
  size_t n = nframes_of(stream, seq);
  s->nframes = (uint32_t)n;
  for (size_t i = 0; i < n; i++)
    s->frames[i] = frame_of(stream, seq, i);
  for (volatile int spin = 0; spin < (int)(seq % 64); spin++)
    ;
  s->labels = checksum(s);
  cp_record_commit(&rec, n, 0);
}

static void on_signal(int sig) {
  (void)sig;
  static CP_TLS uint64_t handler_seq;
  if (my_producer < 0 || handler_seq >= PER_STREAM)
    return;
  produce(PRODUCERS + my_producer, handler_seq++);
}

static void *producer(void *arg) {
  my_producer = (int)(long)arg;
  atomic_store(&producer_tids[my_producer], (pid_t)syscall(SYS_gettid));
  for (uint64_t seq = 0; seq < PER_STREAM; seq++) {
    produce(my_producer, seq);
    /* Some work between samples, so that the ring both fills and drains. */
    for (volatile int spin = 0; spin < 3000; spin++)
      ;
  }
  atomic_fetch_sub(&producers_left, 1);
  /* Alive until the storm ends: it never signals a thread that is gone. */
  while (!atomic_load(&storm_over))
    sched_yield();
  return NULL;
}

/* Signals the producers in turn while they run. */
static void *storm(void *arg) {
  (void)arg;
  pid_t pid = getpid();
  struct timespec pause = {0, 20000};
  while (atomic_load(&producers_left) > 0) {
    for (int p = 0; p < PRODUCERS; p++) {
      pid_t tid = atomic_load(&producer_tids[p]);
      if (tid)
        syscall(SYS_tgkill, pid, tid, SIGUSR2);
    }
    nanosleep(&pause, NULL);
  }
  atomic_store(&storm_over, 1);
  return NULL;
}

static uint64_t read_count, torn;
static int64_t consumed_count[CONTPROF_KIND_COUNT];
static int64_t consumed_quantity[CONTPROF_KIND_COUNT];
static uint64_t consumed_samples[CONTPROF_KIND_COUNT];

static void consume(const cp_raw_sample *s) {
  read_count++;
  int stream = (int)s->tid;
  uint64_t seq = s->span_id;
  if (stream < 0 || stream >= STREAMS || seq >= PER_STREAM ||
      s->labels != checksum(s) || s->kind != kind_of(stream, seq) ||
      s->count != count_of(stream, seq) ||
      s->quantity != quantity_of(stream, seq) ||
      s->nframes != nframes_of(stream, seq)) {
    torn++;
    return;
  }
  for (size_t i = 0; i < s->nframes; i++)
    if (s->frames[i] != frame_of(stream, seq, i)) {
      torn++;
      return;
    }
  struct seen *sn = &seen[stream];
  CHECK(seq >= sn->next_min); /* in order, never twice */
  sn->next_min = seq + 1;
  CHECK(!(sn->bits[seq / 8] & (1u << (seq % 8))));
  sn->bits[seq / 8] |= (uint8_t)(1u << (seq % 8));
  consumed_count[s->kind] += s->count;
  consumed_quantity[s->kind] += s->quantity;
  consumed_samples[s->kind]++;
}

/* In the child of a fork taken while producers were mid-sample: the ring is
 * empty, has no dropped totals, and takes a full ring of new samples.
 * Returns the number of failures (the child's exit status). */
static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

/* A ring of 140 pages that the parent filled before fork: the child's
 * slots start as fresh zero pages. Its consumer's first call faults in only
 * the slots producers fill next (a child that lives a moment pays for what
 * it uses, not the ring), and a later call with the whole ring ahead the
 * rest: its producers then take no page fault. */
#define BIG_SLOTS 256
#define BIG_FRAMES 256
#define FIRST_SLOTS 8
static cp_ring *big_ring;

static void fill(cp_ring *r, int n) {
  for (int i = 0; i < n; i++) {
    cp_record rec;
    if (cp_record_begin_as(&rec, r, CONTPROF_KIND_CPU, 1, i, 1, 0, 0, 0))
      cp_record_commit(&rec, 1, 0);
  }
}

static int fill_big_ring_in_child(void) {
  cp_ring_discard_after_fork(big_ring);
  long faults = minor_faults();
  cp_ring_populate(big_ring, FIRST_SLOTS);
  long first_populate = minor_faults() - faults;
  faults = minor_faults();
  fill(big_ring, FIRST_SLOTS);
  long first_fill = minor_faults() - faults;
  cp_ring_populate(big_ring, BIG_SLOTS);
  faults = minor_faults();
  fill(big_ring, BIG_SLOTS - FIRST_SLOTS);
  long rest_fill = minor_faults() - faults;
  int n = 0;
  for (; cp_ring_peek(big_ring); n++)
    cp_ring_release(big_ring);
  /* 8 slots of 2.1 KiB are 5 pages. Under a sanitizer, its shadow of the
   * slots faults in as they are written: only the count of slots is
   * checked there. */
  if ((!CP_TEST_SANITIZED &&
       (first_populate > 8 || first_fill > 4 || rest_fill > 4)) ||
      n != BIG_SLOTS) {
    fprintf(stderr,
            "child: %ld page faults faulting in %d slots, %ld filling them, "
            "%ld filling the rest; %d slots\n",
            first_populate, FIRST_SLOTS, first_fill, rest_fill, n);
    return 1;
  }
  return 0;
}

static int child_after_fork(void) {
  int failures = 0;
  cp_ring_discard_after_fork(ring);
  failures += cp_ring_peek(ring) != NULL;
  int64_t dropped[CP_NVALUES];
  cp_ring_take_dropped(ring, dropped);
  for (int i = 0; i < CP_NVALUES; i++)
    failures += dropped[i] != 0;
  for (int i = 0; i < RING_SLOTS; i++) {
    cp_record rec;
    cp_raw_sample *s =
        cp_record_begin_as(&rec, ring, CONTPROF_KIND_CPU, 1, i, 1, 0, 0, 0);
    if (!s)
      return failures + 1;
    s->frames[0] = (uint64_t)i;
    cp_record_commit(&rec, 1, 0);
  }
  for (int i = 0; i < RING_SLOTS; i++) {
    const cp_raw_sample *s = cp_ring_peek(ring);
    if (!s)
      return failures + 1;
    failures += s->quantity != i || s->frames[0] != (uint64_t)i;
    cp_ring_release(ring);
  }
  failures += cp_ring_peek(ring) != NULL;
  if (big_ring)
    failures += fill_big_ring_in_child();
  return failures;
}

static void test_ring_producers_and_handlers(void) {
  ring = cp_ring_create(RING_SLOTS, MAX_FRAMES);
  CHECK(ring != NULL);
  if (!ring)
    return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, NULL);

  atomic_store(&producers_left, PRODUCERS);
  pthread_t th[PRODUCERS], stormer;
  for (long i = 0; i < PRODUCERS; i++)
    pthread_create(&th[i], NULL, producer, (void *)i);
  pthread_create(&stormer, NULL, storm, NULL);

  int forked = 0, child_status = -1;
  for (;;) {
    int left = atomic_load(&producers_left);
    const cp_raw_sample *s;
    while ((s = cp_ring_peek(ring)) != NULL) {
      consume(s);
      cp_ring_release(ring);
    }
    /* Once, with the producers mid-flight: a forked child starts empty
     * (not under TSan, which does not support forking threaded programs). */
    if (!forked && !CP_TEST_TSAN && (read_count > 1000 || left == 0)) {
      forked = 1;
      fflush(NULL); /* the child's exit must not print our buffer again */
      pid_t child = fork();
      if (child == 0)
        _exit(child_after_fork());
      CHECK(child > 0);
      if (child > 0)
        waitpid(child, &child_status, 0);
    }
    if (left == 0)
      break;
    cp_ring_wait(ring, 20000, 0);
  }
  for (int i = 0; i < PRODUCERS; i++)
    pthread_join(th[i], NULL);
  pthread_join(stormer, NULL);
  signal(SIGUSR2, SIG_IGN);
  /* Every producer has committed: the rest is in the ring. */
  const cp_raw_sample *s;
  while ((s = cp_ring_peek(ring)) != NULL) {
    consume(s);
    cp_ring_release(ring);
  }

  CHECK_EQ_INT(torn, 0);
  CHECK(forked || CP_TEST_TSAN);
  CHECK(!forked || (WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0));

  /* Exactly once: each attempt was either read or dropped, never both. */
  uint64_t attempts = 0, handler_attempts = 0, missing = 0, both = 0;
  for (int st = 0; st < STREAMS; st++) {
    attempts += streams[st].attempts;
    if (st >= PRODUCERS)
      handler_attempts += streams[st].attempts;
    for (uint64_t q = 0; q < streams[st].attempts; q++) {
      int r = (seen[st].bits[q / 8] >> (q % 8)) & 1;
      int d = (streams[st].dropped[q / 8] >> (q % 8)) & 1;
      missing += !r && !d;
      both += r && d;
    }
    CHECK(seen[st].next_min <= streams[st].attempts);
  }
  CHECK_EQ_INT(missing, 0);
  CHECK_EQ_INT(both, 0);
  CHECK(handler_attempts > 0); /* the handlers did produce */

  /* Drops counted exactly, per kind, in samples, counts and quantities. */
  int64_t ring_dropped[CP_NVALUES];
  cp_ring_take_dropped(ring, ring_dropped);
  uint64_t drops = 0;
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    int64_t pc = 0, pq = 0, dc = 0, dq = 0;
    uint64_t ds = 0;
    for (int st = 0; st < STREAMS; st++) {
      pc += streams[st].produced_count[k];
      pq += streams[st].produced_quantity[k];
      dc += streams[st].dropped_count[k];
      dq += streams[st].dropped_quantity[k];
      ds += streams[st].dropped_samples[k];
    }
    int at = cp_kind_value_index((contprof_sample_kind)k);
    CHECK_EQ_INT(ring_dropped[at], dc);
    CHECK_EQ_INT(ring_dropped[at + 1], dq);
    CHECK_EQ_INT(cp_ring_drops_of_kind(ring, (uint32_t)k), ds);
    CHECK_EQ_INT(consumed_count[k] + dc, pc);
    CHECK_EQ_INT(consumed_quantity[k] + dq, pq);
    drops += ds;
  }
  CHECK_EQ_INT(cp_ring_drops(ring), drops);
  CHECK_EQ_INT(read_count + drops, attempts);
  fprintf(stderr,
          "ring stress: %llu samples (%llu from handlers), %llu read, %llu "
          "dropped\n",
          (unsigned long long)attempts, (unsigned long long)handler_attempts,
          (unsigned long long)read_count, (unsigned long long)drops);
  cp_ring_destroy(ring);
}

/* A child forked with reservations its parent's threads never commit (and
 * committed samples, and dropped totals) starts with an empty ring whose
 * every slot it can use. */
static void test_ring_discard_after_fork(void) {
  ring = cp_ring_create(RING_SLOTS, MAX_FRAMES);
  CHECK(ring != NULL);
  if (!ring)
    return;
  cp_record held[3];
  for (int i = 0; i < 3; i++) /* reserved, never committed */
    CHECK(cp_record_begin_as(&held[i], ring, CONTPROF_KIND_LOCK, 1, 1, 1, 0, 0,
                             0) != NULL);
  for (int i = 0; i < RING_SLOTS - 3; i++) {
    cp_record rec;
    if (cp_record_begin_as(&rec, ring, CONTPROF_KIND_CPU, 1, 1, 1, 0, 0, 0))
      cp_record_commit(&rec, 0, 0);
  }
  cp_record rec;
  CHECK(cp_record_begin_as(&rec, ring, CONTPROF_KIND_ALLOC, 2, 64, 1, 0, 0,
                           0) == NULL); /* full: dropped */
  big_ring = cp_ring_create(BIG_SLOTS, BIG_FRAMES);
  CHECK(big_ring != NULL);
  if (big_ring) {
    cp_ring_populate(big_ring, BIG_SLOTS);
    fill(big_ring, BIG_SLOTS);
  }
  fflush(NULL);
  pid_t child = fork();
  if (child == 0)
    _exit(child_after_fork());
  int status = -1;
  CHECK(child > 0);
  if (child > 0)
    waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  cp_ring_destroy(big_ring);
  big_ring = NULL;
  /* The parent's ring is untouched: the drop is still there. */
  int64_t dropped[CP_NVALUES];
  cp_ring_take_dropped(ring, dropped);
  CHECK_EQ_INT(dropped[cp_kind_value_index(CONTPROF_KIND_ALLOC) + 1], 64);
  cp_ring_destroy(ring);
}

static void *one_sample_later(void *arg) {
  usleep(50000);
  cp_record rec;
  if (cp_record_begin_as(&rec, arg, CONTPROF_KIND_CPU, 1, 1, 1, 0, 0, 0))
    cp_record_commit(&rec, 0, 0);
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* An idle consumer's long wait (the aggregator's, until its next tick)
 * ends at the first sample a producer reserves, not at its timeout; a
 * short wait without that flag is not cut short by one sample. */
static void test_ring_idle_wait_ends_at_first_sample(void) {
  cp_ring *r = cp_ring_create(RING_SLOTS, MAX_FRAMES);
  CHECK(r != NULL);
  if (!r)
    return;
  pthread_t t;
  double began = now_s();
  CHECK(pthread_create(&t, NULL, one_sample_later, r) == 0);
  cp_ring_wait(r, 20ull * 1000000000ull, 1); /* 20 s */
  double waited = now_s() - began;
  pthread_join(t, NULL);
  printf("idle wait ended after %.3f s\n", waited);
  CHECK(waited < 10.0);
  CHECK(cp_ring_peek(r) != NULL);
  cp_ring_release(r);
  /* Without the flag, one sample leaves the wait to its timeout. */
  began = now_s();
  CHECK(pthread_create(&t, NULL, one_sample_later, r) == 0);
  cp_ring_wait(r, 300000000ull, 0); /* 0.3 s */
  waited = now_s() - began;
  pthread_join(t, NULL);
  CHECK(waited >= 0.29);
  CHECK(cp_ring_pending(r));
  cp_ring_release(r);
  CHECK(!cp_ring_pending(r));
  /* A sample reserved, not yet committed: pending, though there is
   * nothing to peek (the consumer waits short then, rather than spin). */
  uint64_t ticket;
  cp_raw_sample *s = cp_ring_reserve(r, &ticket, CONTPROF_KIND_CPU, 1, 1);
  CHECK(s != NULL);
  CHECK(cp_ring_peek(r) == NULL);
  CHECK(cp_ring_pending(r));
  if (s)
    cp_ring_commit(r, ticket);
  CHECK(cp_ring_peek(r) != NULL);
  cp_ring_destroy(r);
}

/* The pressure a filling ring puts on producers that choose their rate: 1
 * while a quarter is free, then a quarter of the slots over the free ones,
 * up to its maximum when full; back to 1 once the consumer has read. (In
 * this ring of 64 the last free slot gives 16, under the maximum.) */
static void test_ring_pressure_follows_fill(void) {
  cp_ring *r = cp_ring_create(RING_SLOTS, MAX_FRAMES);
  CHECK(r != NULL);
  if (!r)
    return;
  unsigned seen[RING_SLOTS + 1];
  for (size_t used = 0; used <= RING_SLOTS; used++) {
    seen[used] = cp_ring_pressure(r);
    uint64_t ticket;
    if (used < RING_SLOTS) {
      CHECK(cp_ring_reserve(r, &ticket, CONTPROF_KIND_ALLOC, 1, 1) != NULL);
      cp_ring_commit(r, ticket);
    }
  }
  CHECK_EQ_INT(seen[0], 1);
  CHECK_EQ_INT(seen[RING_SLOTS * 3 / 4], 1);
  CHECK_EQ_INT(seen[RING_SLOTS * 3 / 4 + 1], 1);
  CHECK_EQ_INT(seen[RING_SLOTS * 7 / 8], 2);
  CHECK_EQ_INT(seen[RING_SLOTS * 15 / 16], 4);
  CHECK_EQ_INT(seen[RING_SLOTS - 1], RING_SLOTS / 4);
  CHECK_EQ_INT(seen[RING_SLOTS], CP_RING_PRESSURE_MAX);
  for (size_t used = 1; used <= RING_SLOTS; used++)
    CHECK(seen[used] >= seen[used - 1]);
  while (cp_ring_peek(r))
    cp_ring_release(r);
  CHECK_EQ_INT(cp_ring_pressure(r), 1);
  cp_ring_destroy(r);
}

/* Producers that outrun the consumer's fault-in, in the ring's first lap:
 * one page fault per page of slots they fill. A read of a slot's sequence
 * number first mapped the zero page there, and the sample's first store
 * took a copy-on-write fault on top (two faults a page, and a TLB flush
 * across the process's CPUs with each second one). */
static void test_ring_first_lap_faults_each_page_once(void) {
  enum { SLOTS = 1024, FRAMES = 128 };
  cp_ring *r = cp_ring_create(SLOTS, FRAMES); /* not populated */
  CHECK(r != NULL);
  if (!r)
    return;
  struct rusage before, after;
  getrusage(RUSAGE_THREAD, &before);
  for (int i = 0; i < SLOTS; i++) {
    uint64_t ticket;
    cp_raw_sample *s = cp_ring_reserve(r, &ticket, CONTPROF_KIND_ALLOC, 1, 1);
    CHECK(s != NULL);
    if (!s)
      break;
    for (int f = 0; f < 4; f++) /* a shallow stack */
      s->frames[f] = (uint64_t)f;
    cp_ring_commit(r, ticket);
  }
  getrusage(RUSAGE_THREAD, &after);
  long faults = after.ru_minflt - before.ru_minflt;
  long pages = (long)(cp_ring_memory(r) / 4096);
  printf("first lap over %ld pages of slots: %ld page faults\n", pages, faults);
#if CP_TEST_SANITIZED
  (void)faults; /* the sanitizers' shadow pages fault too */
#else
  CHECK(faults <= pages + 8);
#endif
  cp_ring_destroy(r);
}

TEST_MAIN(T(test_ring_producers_and_handlers), T(test_ring_discard_after_fork),
          T(test_ring_idle_wait_ends_at_first_sample),
          T(test_ring_pressure_follows_fill),
          T(test_ring_first_lap_faults_each_page_once))
