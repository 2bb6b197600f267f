/* Label memory (issue #15, item 7), in explicit-link mode: label values are
 * bounded (and a bounded value is what the profile carries), label sets are
 * freed once no thread, scope or live heap sample holds them, so RSS stays
 * flat and the set table never fills for good, and a live heap sample keeps
 * its labels however many periods pass. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "contprof/profiler.h"
#include "contprof/runtime.h"
#include "harness.h"
#include "test.h"

/* Resident memory, from /proc/self/statm (pages). */
static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
      resident = 0;
    fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static int push_pop(const char *key, const char *value) {
  contprof_label_scope scope;
  int rc = contprof_label_push(key, value, &scope);
  if (rc == 0)
    contprof_label_pop(&scope);
  return rc;
}

/* The reproduction: 300 distinct 1 MiB values, each under a scope,
 * raised RSS by 311 MB, and kept it after stop. */
static void test_long_values_do_not_grow_rss(void) {
  char *dir = make_temp_dir("labelmem");
  contprof_options o = {.output_dir = dir, .upload_period_s = 3600};
  /* The last export at stop symbolizes whatever the CPU samples hit; with
   * names and lines it opens libc's debug information (tens of MB, kept for
   * later exports), which is not what this test measures: under ASan, where
   * the run is slow enough for samples in libc, it once added 37 MB. */
  setenv("CONTPROF_SYMBOLIZE", "none", 1);
  CHECK_EQ_INT(contprof_start(&o), 0);
  size_t big = (size_t)1 << 20;
  char *value = malloc(big + 1);
  memset(value, 'v', big); /* touched before the baseline */
  value[big] = '\0';
  long before = rss_kib();
  int failed = 0;
  for (int i = 0; i < 300; i++) {
    char head[16];
    snprintf(head, sizeof head, "%08d", i); /* distinct from the start */
    memcpy(value, head, 8);
    failed += push_pop("payload", value) != 0;
  }
  long during = rss_kib();
  CHECK_EQ_INT(contprof_stop(), 0);
  long after = rss_kib();
  printf("RSS before %ld kB, after 300 x 1 MiB values %ld kB, after stop "
         "%ld kB\n",
         before, during, after);
  CHECK_EQ_INT(failed, 0);
  CHECK(during - before < 32 << 10);
  CHECK(after - before < 32 << 10);
  unsetenv("CONTPROF_SYMBOLIZE");
  free(value);
  remove_dir(dir);
}

__attribute__((noinline)) static void marker(void) { __asm__ volatile(""); }

/* A value over 1024 bytes is cut at a character boundary and ends with
 * "..."; a key over 128 bytes is refused. */
static void test_long_value_is_cut_in_the_profile(void) {
  char *dir = make_temp_dir("labelcut");
  contprof_options o = {.output_dir = dir, .upload_period_s = 3600};
  CHECK_EQ_INT(contprof_start(&o), 0);
  static char value[5000];
  memset(value, 'a', sizeof value - 1);
  memcpy(value + 1020, "\xc3\xa9", 2); /* an 'é' across the cut */
  char key[130];
  memset(key, 'k', 129);
  key[129] = '\0';
  contprof_label_scope scope;
  CHECK_EQ_INT(contprof_label_push(key, "x", &scope), CONTPROF_ERR_INVALID);
  key[128] = '\0';
  CHECK_EQ_INT(push_pop(key, "x"), 0);
  CHECK_EQ_INT(contprof_label_push("big", value, &scope), 0);
  uint64_t frame = (uint64_t)(uintptr_t)marker;
  CHECK_EQ_INT(contprof_record_sample(&frame, 1, 0, CONTPROF_LABELS_OF_CALLER,
                                      CONTPROF_KIND_CPU, 1, 10000000),
               0);
  contprof_label_pop(&scope);
  CHECK_EQ_INT(contprof_flush(), 0);
  CHECK_EQ_INT(contprof_stop(), 0);

  char want[1100];
  memset(want, 'a', 1020);
  memcpy(want + 1020, "...", 4);
  pprof_profile *profiles[4];
  size_t n = read_profiles(dir, profiles, 4, NULL);
  int found = 0;
  for (size_t f = 0; f < n; f++) {
    for (size_t i = 0; i < profiles[f]->n_sample; i++) {
      const Perftools__Profiles__Label *l =
          pprof_sample_label(profiles[f], profiles[f]->sample[i], "big");
      const char *got = l ? pprof_label_str(profiles[f], l) : NULL;
      if (!got)
        continue;
      /* The recorded sample; a CPU sample of this thread may also land
       * while the label is current (seen under load): its value must be
       * cut the same way, but it is not the one counted. */
      found += pprof_sample_has_function(profiles[f], profiles[f]->sample[i],
                                         "marker");
      CHECK(strlen(got) <= 1024);
      CHECK_EQ_STR(got, want);
    }
    pprof_profile_free(profiles[f]);
  }
  CHECK_EQ_INT(found, 1);
  remove_dir(dir);
}

/* The set table held 65,536 sets for the life of the process; a server
 * labelling each request with its id was refused labels after that. */
static void test_sets_are_reused_over_time(void) {
  char *dir = make_temp_dir("labelsets");
  contprof_options o = {.output_dir = dir, .upload_period_s = 3600};
  CHECK_EQ_INT(contprof_start(&o), 0);
  long before = rss_kib();
  int failed = 0;
  char value[32];
  for (int i = 0; i < 70000; i++) {
    snprintf(value, sizeof value, "request-%d", i);
    failed += push_pop("request", value) != 0;
    if (i % 10000 == 9999)
      CHECK_EQ_INT(contprof_flush(), 0); /* a period ends */
  }
  CHECK_EQ_INT(failed, 0);
  CHECK_EQ_INT(contprof_stop(), 0);
  /* Stopped, nothing is pending: sets go as soon as room is needed. */
  for (int i = 0; i < 70000; i++) {
    snprintf(value, sizeof value, "stopped-%d", i);
    failed += push_pop("request", value) != 0;
  }
  long after = rss_kib();
  printf("140000 distinct sets: %d refused, RSS +%ld kB\n", failed,
         after - before);
  CHECK_EQ_INT(failed, 0);
#ifndef __SANITIZE_ADDRESS__
  /* Not under ASan: its quarantine keeps freed sets' memory and its shadow
   * counts in the RSS (+75 MB there, measured). */
  CHECK(after - before < 32 << 10);
#endif
  remove_dir(dir);
}

void *kept_alloc(size_t n);
__attribute__((noinline, noclone)) void *kept_alloc(size_t n) {
  void *p = malloc(n);
  __asm__ volatile("" ::: "memory");
  return p;
}

/* A live heap sample holds its label set: after its scope is gone and
 * periods pass (each of which frees unheld sets), the in-use samples still
 * carry the label. */
static void test_heap_samples_keep_their_labels(void) {
#ifdef __SANITIZE_ADDRESS__
  /* ASan's malloc comes before libcontprof.so's: no heap profile here (as
   * for test_alloc_api, docs/hardening.md). */
  printf("skip: the heap profile needs contprof's malloc first\n");
  return;
#endif
  char *dir = make_temp_dir("labelheap");
  setenv("CONTPROF_ALLOC_SAMPLE_BYTES", "4096", 1);
  contprof_options o = {
      .output_dir = dir, .upload_period_s = 3600, .profiles = "heap"};
  CHECK_EQ_INT(contprof_start(&o), 0);
  unsetenv("CONTPROF_ALLOC_SAMPLE_BYTES");
  enum { NBLOCKS = 2000 };
  static void *blocks[NBLOCKS];
  contprof_label_scope scope;
  CHECK_EQ_INT(contprof_label_push("phase", "kept", &scope), 0);
  for (int i = 0; i < NBLOCKS; i++)
    blocks[i] = kept_alloc(1024);
  contprof_label_pop(&scope);
  for (int round = 0; round < 3; round++) {
    char value[32];
    for (int i = 0; i < 1000; i++) {
      snprintf(value, sizeof value, "other-%d-%d", round, i);
      push_pop("phase", value);
    }
    CHECK_EQ_INT(contprof_flush(), 0);
  }
  CHECK_EQ_INT(contprof_stop(), 0);
  for (int i = 0; i < NBLOCKS; i++)
    free(blocks[i]);

  pprof_profile *profiles[8];
  size_t n = read_profiles(dir, profiles, 8, NULL);
  int with_heap = 0;
  for (size_t f = 0; f < n; f++) {
    const pprof_profile *p = profiles[f];
    int inuse = pprof_sample_type_index(p, "inuse-space");
    if (inuse < 0) { /* the last, made after the sampler stopped */
      pprof_profile_free(profiles[f]);
      continue;
    }
    with_heap++;
    int64_t labeled = 0, unlabeled = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
      const Perftools__Profiles__Sample *s = p->sample[i];
      if (!pprof_sample_has_function(p, s, "kept_alloc"))
        continue;
      const Perftools__Profiles__Label *l = pprof_sample_label(p, s, "phase");
      const char *v = l ? pprof_label_str(p, l) : NULL;
      if (v && strcmp(v, "kept") == 0)
        labeled += s->value[inuse];
      else
        unlabeled += s->value[inuse];
    }
    printf("profile %zu: kept_alloc in use %lld B labeled, %lld B not\n", f,
           (long long)labeled, (long long)unlabeled);
    CHECK(labeled > 0);
    CHECK_EQ_INT(unlabeled, 0);
    pprof_profile_free(profiles[f]);
  }
  CHECK(with_heap >= 3); /* one per flush */
  remove_dir(dir);
}

/* Label memory counts against CONTPROF_MAX_MEMORY_MB: with 8 MiB, sets
 * take 2 MiB at most; held sets past that are refused, and once given back
 * (and two profiles out) there is room again. */
static void test_label_memory_is_bounded(void) {
  char *dir = make_temp_dir("labelcap");
  setenv("CONTPROF_MAX_MEMORY_MB", "8", 1);
  contprof_options o = {.output_dir = dir, .upload_period_s = 3600};
  CHECK_EQ_INT(contprof_start(&o), 0);
  unsetenv("CONTPROF_MAX_MEMORY_MB");
  enum { MAX_HELD = 4000 };
  static uint32_t held[MAX_HELD];
  static char value[1001];
  memset(value, 'x', 1000);
  int n = 0, refused = 0;
  for (; n < MAX_HELD; n++) {
    snprintf(value, 16, "%07d", n);
    value[7] = 'x';
    contprof_label_scope scope;
    int rc = contprof_label_push("blob", value, &scope);
    if (rc != 0) {
      refused = rc;
      break;
    }
    held[n] = contprof_labels_hold(contprof_labels_current());
    contprof_label_pop(&scope);
  }
  printf("%d sets of 1 kB held before %s\n", n, contprof_strerror(refused));
  CHECK_EQ_INT(refused, CONTPROF_ERR_LABELS_FULL);
  CHECK(n > 1000 && n * 1000 <= 2 << 20);
  memcpy(value, "another", 7);
  CHECK_EQ_INT(push_pop("blob", value), CONTPROF_ERR_LABELS_FULL);
  for (int i = 0; i < n; i++)
    contprof_labels_release(held[i]);
  CHECK_EQ_INT(push_pop("blob", value), CONTPROF_ERR_LABELS_FULL); /* yet */
  CHECK_EQ_INT(contprof_flush(), 0);
  CHECK_EQ_INT(contprof_flush(), 0); /* two profiles out: freed */
  CHECK_EQ_INT(push_pop("blob", value), 0);
  CHECK_EQ_INT(contprof_stop(), 0);
  remove_dir(dir);
}

static void *push_and_exit(void *arg) {
  char value[1001];
  memset(value, 'y', 1000);
  value[1000] = '\0';
  snprintf(value, 16, "%07ld", (long)arg);
  value[7] = 'y';
  contprof_label_scope scope; /* never popped: the thread just ends */
  return (void *)(long)contprof_label_push("thread", value, &scope);
}

/* A thread that ends inside a label scope gives its set back: 3000 threads
 * each leaving a distinct 1 kB set behind would fill the 2 MiB of
 * CONTPROF_MAX_MEMORY_MB=8 for good otherwise. */
static void test_thread_exit_gives_labels_back(void) {
  char *dir = make_temp_dir("labelexit");
  setenv("CONTPROF_MAX_MEMORY_MB", "8", 1);
  contprof_options o = {.output_dir = dir, .upload_period_s = 3600};
  CHECK_EQ_INT(contprof_start(&o), 0); /* sets the 2 MiB limit */
  unsetenv("CONTPROF_MAX_MEMORY_MB");
  CHECK_EQ_INT(contprof_stop(), 0); /* stopped: unheld sets go at once */
  int refused = 0;
  for (long i = 0; i < 3000; i++) {
    pthread_t t;
    void *rc = NULL;
    CHECK_EQ_INT(pthread_create(&t, NULL, push_and_exit, (void *)i), 0);
    pthread_join(t, &rc);
    refused += rc != NULL;
  }
  printf("3000 threads ended inside a 1 kB label: %d refused\n", refused);
  CHECK_EQ_INT(refused, 0);
  remove_dir(dir);
}

static _Atomic int stress_stop;

static void *stress_thread(void *arg) {
  long id = (long)arg;
  uint64_t frame = (uint64_t)(uintptr_t)marker;
  char value[64];
  for (long i = 0; !stress_stop; i++) {
    /* A few shared values and a new one every 8th push. */
    if (i % 8 == 0)
      snprintf(value, sizeof value, "v-%ld-%ld", id, i);
    else
      snprintf(value, sizeof value, "v-shared-%ld", i % 5);
    contprof_label_scope outer, inner;
    if (contprof_label_push("t", value, &outer) != 0)
      continue;
    if (contprof_label_push("u", "inner", &inner) == 0) {
      contprof_record_sample(&frame, 1, 0, CONTPROF_LABELS_OF_CALLER,
                             CONTPROF_KIND_CPU, 1, 1000);
      contprof_label_pop(&inner);
    }
    contprof_record_sample(&frame, 1, 0, CONTPROF_LABELS_OF_CALLER,
                           CONTPROF_KIND_CPU, 1, 1000);
    contprof_label_pop(&outer);
  }
  return NULL;
}

/* Threads push, sample and pop while periods are exported and sets freed:
 * every label in every profile is one that was pushed (no freed or reused
 * memory read), and nothing crashes. */
static void test_concurrent_pushes_and_exports(void) {
  char *dir = make_temp_dir("labelstress");
  contprof_options o = {.output_dir = dir, .upload_period_s = 3600};
  CHECK_EQ_INT(contprof_start(&o), 0);
  pthread_t t[3];
  stress_stop = 0;
  for (long i = 0; i < 3; i++)
    pthread_create(&t[i], NULL, stress_thread, (void *)i);
  for (int i = 0; i < 8; i++) {
    usleep(50000);
    CHECK_EQ_INT(contprof_flush(), 0);
  }
  stress_stop = 1;
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  CHECK_EQ_INT(contprof_stop(), 0);

  pprof_profile *profiles[16];
  size_t n = read_profiles(dir, profiles, 16, NULL);
  long labeled = 0, bad = 0;
  for (size_t f = 0; f < n; f++) {
    const pprof_profile *p = profiles[f];
    for (size_t i = 0; i < p->n_sample; i++) {
      const Perftools__Profiles__Sample *s = p->sample[i];
      if (!pprof_sample_has_function(p, s, "marker"))
        continue;
      const Perftools__Profiles__Label *l = pprof_sample_label(p, s, "t");
      const char *v = l ? pprof_label_str(p, l) : NULL;
      const Perftools__Profiles__Label *u = pprof_sample_label(p, s, "u");
      const char *uv = u ? pprof_label_str(p, u) : NULL;
      labeled += v != NULL;
      bad += !v || strncmp(v, "v-", 2) != 0 || (uv && strcmp(uv, "inner"));
    }
    pprof_profile_free(profiles[f]);
  }
  printf("%zu profiles, %ld labeled samples, %ld bad\n", n, labeled, bad);
  CHECK(n >= 8);
  CHECK(labeled > 0);
  CHECK_EQ_INT(bad, 0);
  remove_dir(dir);
}

TEST_MAIN(T(test_long_values_do_not_grow_rss),
          T(test_long_value_is_cut_in_the_profile),
          T(test_sets_are_reused_over_time),
          T(test_heap_samples_keep_their_labels),
          T(test_label_memory_is_bounded),
          T(test_concurrent_pushes_and_exports),
          T(test_thread_exit_gives_labels_back))
