/* The call tree merges identical stack-plus-label samples, shares prefixes,
 * keeps runtime frames, marks truncated stacks, folds what exceeds its memory
 * bound into [overflow] without losing values, names native frames when
 * told to later; the ring hands every sample over or counts it as dropped. */
#include <pthread.h>

#include "aggregator/calltree.h"
#include "aggregator/frames.h"
#include "aggregator/ring.h"
#include "test.h"

static int64_t total_value(const cp_generation *g, int v) {
  int64_t sum = 0;
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    cp_sample s;
    cp_gen_sample(g, i, &s);
    sum += s.values[v];
  }
  return sum;
}

static size_t nonzero_samples(const cp_generation *g) {
  size_t n = 0;
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    cp_sample s;
    cp_gen_sample(g, i, &s);
    n += s.values[CP_V_CPU_TIME] != 0;
  }
  return n;
}

static const char *leaf_function(const cp_generation *g, const cp_sample *s) {
  return cp_gen_location(g, cp_gen_node(g, s->key.node)->location)->function;
}

static void test_merge_identical(void) {
  cp_generation *g = cp_gen_create(1, 1 << 20);
  uint64_t a = contprof_frame_intern("a", "x.py", 1);
  uint64_t b = contprof_frame_intern("b", "x.py", 2);
  uint64_t stack[] = {a, b};
  cp_sample_key key = {.labels = 0, .tid = 7};
  for (int i = 0; i < 100; i++)
    CHECK_EQ_INT(cp_gen_add(g, stack, 2, 0, &key, CONTPROF_KIND_CPU, 1, 10), 0);
  CHECK_EQ_INT(nonzero_samples(g), 1);
  CHECK_EQ_INT(total_value(g, CP_V_CPU_SAMPLES), 100);
  CHECK_EQ_INT(total_value(g, CP_V_CPU_TIME), 1000);
  /* Another thread or another kind of value: same path, separate sample. */
  cp_sample_key other = {.tid = 8};
  cp_gen_add(g, stack, 2, 0, &other, CONTPROF_KIND_CPU, 1, 10);
  CHECK_EQ_INT(nonzero_samples(g), 2);
  cp_gen_add(g, stack, 2, 0, &key, CONTPROF_KIND_WALL, 1, 99);
  CHECK_EQ_INT(nonzero_samples(g), 2);
  CHECK_EQ_INT(total_value(g, CP_V_WALL_TIME), 99);
  CHECK_EQ_INT(cp_gen_samples_added(g), 102);
  cp_gen_destroy(g);
}

static void test_labels_split_samples(void) {
  cp_generation *g = cp_gen_create(1, 1 << 20);
  uint64_t a = contprof_frame_intern("a", "x.py", 1);
  cp_sample_key k1 = {.labels = 1, .tid = 1}, k2 = {.labels = 2, .tid = 1};
  cp_gen_add(g, &a, 1, 0, &k1, CONTPROF_KIND_CPU, 1, 1);
  cp_gen_add(g, &a, 1, 0, &k2, CONTPROF_KIND_CPU, 1, 1);
  cp_gen_add(g, &a, 1, 0, &k1, CONTPROF_KIND_CPU, 1, 1);
  CHECK_EQ_INT(nonzero_samples(g), 2);
  cp_gen_destroy(g);
}

static void test_shared_prefixes(void) {
  cp_generation *g = cp_gen_create(1, 1 << 20);
  uint64_t a = contprof_frame_intern("a", "f", 1);
  uint64_t b = contprof_frame_intern("b", "f", 1);
  uint64_t c = contprof_frame_intern("c", "f", 1);
  uint64_t d = contprof_frame_intern("d", "f", 1);
  uint64_t s1[] = {a, b, c}, s2[] = {d, b, c};
  cp_sample_key key = {.tid = 1};
  size_t before = cp_gen_node_count(g);
  cp_gen_add(g, s1, 3, 0, &key, CONTPROF_KIND_CPU, 1, 1);
  cp_gen_add(g, s2, 3, 0, &key, CONTPROF_KIND_CPU, 1, 1);
  /* c, b, a, d: the common prefix c <- b is stored once. */
  CHECK_EQ_INT(cp_gen_node_count(g) - before, 4);
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    cp_sample sample;
    cp_gen_sample(g, i, &sample);
    const cp_sample *s = &sample;
    if (!s->values[CP_V_CPU_TIME])
      continue;
    const char *leaf = leaf_function(g, s);
    CHECK(strcmp(leaf, "a") == 0 || strcmp(leaf, "d") == 0);
    const cp_node *n = cp_gen_node(g, s->key.node);
    const cp_node *parent = cp_gen_node(g, n->parent);
    CHECK_EQ_STR(cp_gen_location(g, parent->location)->function, "b");
  }
  cp_gen_destroy(g);
}

static void test_runtime_frame_location(void) {
  cp_generation *g = cp_gen_create(1, 1 << 20);
  uint64_t f = contprof_frame_intern("Handler.get", "app/views.py", 42);
  CHECK(f & CONTPROF_FRAME_RUNTIME);
  CHECK_EQ_INT(contprof_frame_intern("Handler.get", "app/views.py", 42), f);
  CHECK(contprof_frame_intern("Handler.get", "app/views.py", 43) != f);
  cp_sample_key key = {.tid = 1};
  cp_gen_add(g, &f, 1, 0, &key, CONTPROF_KIND_CPU, 1, 1);
  int found = 0;
  for (size_t i = 0; i < cp_gen_location_count(g); i++) {
    const cp_location *l = cp_gen_location(g, i);
    if (l->function && strcmp(l->function, "Handler.get") == 0) {
      CHECK_EQ_STR(l->file, "app/views.py");
      CHECK_EQ_INT(l->line, 42);
      CHECK(l->mapping == NULL);
      found = 1;
    }
  }
  CHECK(found);
  cp_gen_destroy(g);
}

static void test_truncated_marker(void) {
  cp_generation *g = cp_gen_create(1, 1 << 20);
  uint64_t a = contprof_frame_intern("deep", "f", 1);
  cp_sample_key key = {.tid = 1};
  cp_gen_add(g, &a, 1, 1, &key, CONTPROF_KIND_CPU, 1, 1);
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    cp_sample sample;
    cp_gen_sample(g, i, &sample);
    const cp_sample *s = &sample;
    if (!s->values[CP_V_CPU_TIME])
      continue;
    const cp_node *leaf = cp_gen_node(g, s->key.node);
    const cp_node *root_child = cp_gen_node(g, leaf->parent);
    CHECK_EQ_INT(root_child->parent, 0);
    CHECK_EQ_STR(cp_gen_location(g, root_child->location)->function,
                 "[truncated]");
  }
  cp_gen_destroy(g);
}

static void test_memory_bound_overflow(void) {
  size_t limit = 256 << 10;
  cp_generation *g = cp_gen_create(1, limit);
  cp_sample_key key = {.tid = 1};
  int overflowed = 0;
  const int n = 20000;
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "fn%d", i);
    uint64_t stack[] = {contprof_frame_intern(name, "f", i),
                        contprof_frame_intern("main", "f", 0)};
    overflowed += cp_gen_add(g, stack, 2, 0, &key, CONTPROF_KIND_CPU, 1, 3);
  }
  CHECK(overflowed > 0);
  CHECK_EQ_INT(cp_gen_samples_overflowed(g), overflowed);
  CHECK(cp_gen_memory_used(g) <= limit);
  /* Nothing is lost: every value is in a sample, some in [overflow]. */
  CHECK_EQ_INT(total_value(g, CP_V_CPU_SAMPLES), n);
  CHECK_EQ_INT(total_value(g, CP_V_CPU_TIME), 3 * n);
  int64_t in_overflow = 0;
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    cp_sample sample;
    cp_gen_sample(g, i, &sample);
    const cp_sample *s = &sample;
    const char *leaf = leaf_function(g, s);
    if (leaf && strcmp(leaf, "[overflow]") == 0)
      in_overflow += s->values[CP_V_CPU_SAMPLES];
  }
  CHECK_EQ_INT(in_overflow, overflowed);
  cp_gen_destroy(g);
}

/* A generation stores values narrowly until a sum does not fit (calltree.c):
 * whatever the values (one period each, jittered, larger than 32 bits,
 * negative as heap frees are, wrapping past 64 bits), every row reads back
 * the exact 64-bit sums a plain int64 accumulator gives. */
static void test_values_exact(void) {
  cp_generation *g = cp_gen_create(1, 64 << 20);
  uint64_t a = contprof_frame_intern("a", "v.c", 1);
  uint64_t b = contprof_frame_intern("b", "v.c", 2);
  enum { ROWS = 6 };
  uint64_t expect[ROWS][CP_NVALUES] = {{0}};
  uint64_t rng = 99;
  for (int i = 0; i < 300000; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = rng >> 11;
    int row = (int)(r % ROWS);
    uint64_t stack[] = {row & 1 ? a : b, a};
    cp_sample_key key = {.tid = 1 + row / 2};
    contprof_sample_kind kind = (contprof_sample_kind)((r >> 8) % 5);
    int64_t count = 1 + (int64_t)((r >> 12) % 3), quantity;
    switch (kind) {
    case CONTPROF_KIND_CPU: /* a period per count: stays narrow */
      quantity = count * 10000000;
      break;
    case CONTPROF_KIND_WALL: /* jittered: narrow until the sums grow */
      quantity = count * 10000000 + (int64_t)((r >> 20) % 4000000) - 2000000;
      break;
    case CONTPROF_KIND_ALLOC: /* larger than 32 bits from the start */
      quantity = (int64_t)((r >> 16) % 6000000000ull);
      break;
    case CONTPROF_KIND_INUSE: /* frees: negative counts and quantities */
      count = (r >> 30) & 1 ? -count : count;
      quantity = count * (int64_t)(1 + (r >> 40) % 100000);
      break;
    default: /* wraps past 64 bits */
      quantity = INT64_MAX - (int64_t)(r % 1000);
      break;
    }
    CHECK_EQ_INT(cp_gen_add(g, stack, 2, 0, &key, kind, count, quantity), 0);
    int v = cp_kind_value_index(kind);
    expect[row][v] += (uint64_t)count;
    expect[row][v + 1] += (uint64_t)quantity;
  }
  int rows_seen = 0;
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    cp_sample s;
    cp_gen_sample(g, i, &s);
    if (s.key.tid == 0)
      continue; /* [overflow], empty */
    const char *leaf = leaf_function(g, &s);
    int row = 2 * (s.key.tid - 1) + (strcmp(leaf, "a") == 0);
    rows_seen++;
    for (int v = 0; v < CP_NVALUES; v++)
      CHECK_EQ_INT((uint64_t)s.values[v], expect[row][v]);
  }
  CHECK_EQ_INT(rows_seen, ROWS);
  cp_gen_destroy(g);
}

/* After a library is unloaded the same address may be other code:
 * cp_gen_forget_addresses makes later samples resolve their addresses
 * anew (new locations), while the earlier samples keep theirs; the location
 * index then holds fewer entries than there are locations, and grows past
 * them. */
static void test_forget_addresses(void) {
  cp_generation *g = cp_gen_create(1, 64 << 20);
  cp_sample_key key = {.tid = 1};
  size_t before = cp_gen_location_count(g);
  for (uint64_t i = 0; i < 100; i++) {
    uint64_t pc = 0x7000 + 16 * i;
    cp_gen_add(g, &pc, 1, 0, &key, CONTPROF_KIND_CPU, 1, 1);
    cp_gen_add(g, &pc, 1, 0, &key, CONTPROF_KIND_CPU, 1, 1);
  }
  CHECK_EQ_INT(cp_gen_location_count(g) - before, 100);
  cp_gen_forget_addresses(g);
  for (uint64_t i = 0; i < 400; i++) {
    uint64_t pc = 0x7000 + 16 * i;
    cp_gen_add(g, &pc, 1, 0, &key, CONTPROF_KIND_CPU, 1, 1);
    cp_gen_add(g, &pc, 1, 0, &key, CONTPROF_KIND_CPU, 1, 1);
  }
  /* The first 100 addresses twice (before and after), the others once. */
  CHECK_EQ_INT(cp_gen_location_count(g) - before, 500);
  size_t rows = 0;
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    cp_sample s;
    cp_gen_sample(g, i, &s);
    if (!s.values[CP_V_CPU_SAMPLES])
      continue;
    rows++;
    CHECK_EQ_INT(s.values[CP_V_CPU_SAMPLES], 2);
    const cp_location *l =
        cp_gen_location(g, cp_gen_node(g, s.key.node)->location);
    CHECK(l->address >= 0x7000 && l->address < 0x7000 + 16 * 400);
  }
  CHECK_EQ_INT(rows, 500);
  cp_gen_destroy(g);
}

static __attribute__((noinline)) int deferred_leaf(int x) {
  __asm__ volatile("" ::: "memory");
  return x + 1;
}

static int stop_now(void) { return 1; }

/* With reads deferred (the aggregator's drain), a native frame in an object
 * whose symbol table is not read yet gets its mapping at once and its name
 * when cp_gen_resolve_pending reads the table; the drain thread's stop
 * callback ends the reading between two locations. */
static void test_names_deferred(void) {
  cp_generation *g = cp_gen_create(1, 1 << 20);
  cp_gen_set_defer_reads(g, 1);
  cp_sample_key key = {.tid = 1};
  uint64_t pc = (uint64_t)(uintptr_t)deferred_leaf + 1;
  CHECK_EQ_INT(cp_gen_add(g, &pc, 1, 0, &key, CONTPROF_KIND_CPU, 1, 1), 0);
  CHECK_EQ_INT(cp_gen_sample_count(g) > 0, 1);
  const cp_location *l = cp_gen_location(g, cp_gen_location_count(g) - 1);
  CHECK(l->mapping != NULL);
  CHECK(l->function == NULL); /* this executable's table is not read yet */
  CHECK_EQ_INT(cp_gen_resolve_pending(g, stop_now), 1);
  CHECK(l->function == NULL);
  CHECK_EQ_INT(cp_gen_resolve_pending(g, NULL), 0);
  CHECK_EQ_STR(l->function, "deferred_leaf");
  /* The table is read now: a new location is named at once. */
  uint64_t other = (uint64_t)(uintptr_t)stop_now + 1;
  cp_gen_add(g, &other, 1, 0, &key, CONTPROF_KIND_CPU, 1, 1);
  CHECK_EQ_STR(cp_gen_location(g, cp_gen_location_count(g) - 1)->function,
               "stop_now");
  CHECK_EQ_INT(cp_gen_resolve_pending(g, NULL), 0);
  cp_gen_destroy(g);
  CHECK_EQ_INT(deferred_leaf(1), 2);
}

static void test_thread_names(void) {
  cp_generation *g = cp_gen_create(1, 1 << 20);
  for (int t = 1; t <= 500; t++) {
    char name[16];
    snprintf(name, sizeof name, "worker-%d", t);
    cp_gen_set_thread_name(g, t, name);
  }
  CHECK_EQ_STR(cp_gen_thread_name(g, 1), "worker-1");
  CHECK_EQ_STR(cp_gen_thread_name(g, 377), "worker-377");
  CHECK(cp_gen_thread_name(g, 501) == NULL);
  /* The latest name wins (a binding names its threads after their first
   * sample may have read the kernel's name). */
  cp_gen_set_thread_name(g, 1, "renamed");
  CHECK_EQ_STR(cp_gen_thread_name(g, 1), "renamed");
  cp_gen_destroy(g);
}

/* --- ring ---------------------------------------------------------------- */

static void test_ring_order_and_drops(void) {
  cp_ring *r = cp_ring_create(8, 4);
  uint64_t t;
  for (int i = 0; i < 8; i++) {
    cp_raw_sample *s = cp_ring_reserve(r, &t, CONTPROF_KIND_CPU, 1, 10);
    CHECK(s != NULL);
    if (!s)
      return;
    s->count = i;
    s->nframes = 4;
    for (int f = 0; f < 4; f++)
      s->frames[f] = (uint64_t)(i * 10 + f);
    cp_ring_commit(r, t);
  }
  CHECK(cp_ring_reserve(r, &t, CONTPROF_KIND_ALLOC, 3, 4096) == NULL);
  CHECK_EQ_INT(cp_ring_drops(r), 1);
  cp_ring_drop(r, CONTPROF_KIND_ALLOC, 1, 100);
  CHECK_EQ_INT(cp_ring_drops(r), 2);
  /* A dropped sample's values are kept: only its stack is lost. */
  int64_t dropped[16];
  cp_ring_take_dropped(r, dropped);
  CHECK_EQ_INT(dropped[2 * CONTPROF_KIND_ALLOC], 4);
  CHECK_EQ_INT(dropped[2 * CONTPROF_KIND_ALLOC + 1], 4196);
  CHECK_EQ_INT(dropped[2 * CONTPROF_KIND_CPU], 0);
  cp_ring_take_dropped(r, dropped);
  CHECK_EQ_INT(dropped[2 * CONTPROF_KIND_ALLOC], 0);
  for (int i = 0; i < 8; i++) {
    const cp_raw_sample *s = cp_ring_peek(r);
    CHECK(s != NULL);
    if (!s)
      return;
    CHECK_EQ_INT(s->count, i);
    CHECK_EQ_INT(s->frames[3], i * 10 + 3);
    cp_ring_release(r);
  }
  CHECK(cp_ring_peek(r) == NULL);
  cp_ring_destroy(r);
}

#define PRODUCERS 4
#define PER_PRODUCER 200000
static cp_ring *stress_ring;

static void *producer(void *arg) {
  long id = (long)arg;
  for (int i = 0; i < PER_PRODUCER; i++) {
    uint64_t t;
    cp_raw_sample *s =
        cp_ring_reserve(stress_ring, &t, CONTPROF_KIND_CPU, 1, 1);
    if (!s)
      continue;
    s->count = 1;
    s->quantity = id;
    s->frames[0] = (uint64_t)id;
    cp_ring_commit(stress_ring, t);
  }
  return NULL;
}

static void test_ring_concurrent(void) {
  stress_ring = cp_ring_create(1024, 2);
  pthread_t th[PRODUCERS];
  for (long i = 0; i < PRODUCERS; i++)
    pthread_create(&th[i], NULL, producer, (void *)i);
  uint64_t received = 0, corrupt = 0;
  int done = 0;
  while (!done) {
    const cp_raw_sample *s;
    while ((s = cp_ring_peek(stress_ring)) != NULL) {
      corrupt += s->quantity != (int64_t)s->frames[0];
      received++;
      cp_ring_release(stress_ring);
    }
    if (received + cp_ring_drops(stress_ring) ==
        (uint64_t)PRODUCERS * PER_PRODUCER)
      done = 1;
  }
  for (int i = 0; i < PRODUCERS; i++)
    pthread_join(th[i], NULL);
  CHECK_EQ_INT(corrupt, 0);
  CHECK_EQ_INT(received + cp_ring_drops(stress_ring),
               (uint64_t)PRODUCERS * PER_PRODUCER);
  cp_ring_destroy(stress_ring);
}

TEST_MAIN(T(test_names_deferred), T(test_merge_identical),
          T(test_labels_split_samples), T(test_shared_prefixes),
          T(test_runtime_frame_location), T(test_truncated_marker),
          T(test_memory_bound_overflow), T(test_values_exact),
          T(test_forget_addresses), T(test_thread_names),
          T(test_ring_order_and_drops), T(test_ring_concurrent))
