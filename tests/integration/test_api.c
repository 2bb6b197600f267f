/* The public API in explicit-link mode: lifecycle calls are defined in every
 * order and from several threads, labels land on exactly the samples taken
 * while they are set, flush writes a profile, and an unwritable directory
 * costs one message while the program runs on. */
#include <pthread.h>
#include <time.h>

#include "contprof/profiler.h"
#include "harness.h"
#include "test.h"

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile double sink;
static void burn(uint64_t ns) {
  uint64_t end = thread_cpu_ns() + ns;
  double x = 1;
  while (thread_cpu_ns() < end)
    for (int i = 0; i < 300; i++)
      x = x * 1.0000001 + 0.5;
  sink += x;
}

/* The empty asm after each call keeps it from becoming a tail call, which
 * would take the function's frame off the stack. */
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")
__attribute__((noinline)) void labeled_work(void) {
  burn(7000000);
  KEEP_FRAME();
}
__attribute__((noinline)) void nested_work(void) {
  burn(5000000);
  KEEP_FRAME();
}
__attribute__((noinline)) void unlabeled_work(void) {
  burn(7000000);
  KEEP_FRAME();
}

static void test_lifecycle_errors(void) {
  CHECK_EQ_INT(contprof_stop(), CONTPROF_ERR_NOT_STARTED);
  CHECK_EQ_INT(contprof_flush(), CONTPROF_ERR_NOT_STARTED);
  CHECK_EQ_INT(contprof_is_running(), 0);
  char *dir = make_temp_dir("api");
  contprof_options o = {.output_dir = dir, .upload_period_s = 3600};
  CHECK_EQ_INT(contprof_start(&o), 0);
  CHECK_EQ_INT(contprof_start(&o), CONTPROF_ERR_ALREADY_STARTED);
  CHECK_EQ_INT(contprof_is_running(), 1);
  CHECK_EQ_INT(contprof_stop(), 0);
  CHECK_EQ_INT(contprof_stop(), CONTPROF_ERR_NOT_STARTED);
  contprof_options bad = {.output_dir = dir, .cpu_hz = 100000};
  CHECK_EQ_INT(contprof_start(&bad), CONTPROF_ERR_INVALID);
  CHECK_EQ_INT(contprof_is_running(), 0);
  for (int s = 0; s >= -9; s--)
    CHECK(contprof_strerror(s) != NULL && *contprof_strerror(s));
  remove_dir(dir);
}

static void *start_stop_loop(void *arg) {
  contprof_options *o = arg;
  for (int i = 0; i < 20; i++) {
    int rc = contprof_start(o);
    CHECK(rc == 0 || rc == CONTPROF_ERR_ALREADY_STARTED);
    burn(200000);
    rc = contprof_flush();
    CHECK(rc == 0 || rc == CONTPROF_ERR_NOT_STARTED);
    rc = contprof_stop();
    CHECK(rc == 0 || rc == CONTPROF_ERR_NOT_STARTED);
  }
  return NULL;
}

static void test_concurrent_lifecycle(void) {
  char *dir = make_temp_dir("race");
  contprof_options o = {
      .output_dir = dir, .upload_period_s = 3600, .log_level = "error"};
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&t[i], NULL, start_stop_loop, &o);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  CHECK_EQ_INT(contprof_is_running(), 0);
  remove_dir(dir);
}

static int has_label(const pprof_profile *p,
                     const Perftools__Profiles__Sample *s, const char *key,
                     const char *value) {
  const Perftools__Profiles__Label *l = pprof_sample_label(p, s, key);
  const char *str = l ? pprof_label_str(p, l) : NULL;
  return str && strcmp(str, value) == 0;
}

static void *worker_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 60; i++) {
    contprof_label_scope outer;
    CHECK_EQ_INT(contprof_label_push("endpoint", "/checkout", &outer), 0);
    labeled_work();
    {
      CONTPROF_LABEL_SCOPE("customer", "acme");
      nested_work();
    }
    labeled_work();
    contprof_label_pop(&outer);
    unlabeled_work();
  }
  return NULL;
}

static void test_labels_on_the_right_samples(void) {
  char *dir = make_temp_dir("labels");
  contprof_options o = {
      .output_dir = dir, .upload_period_s = 3600, .cpu_hz = 250};
  CHECK_EQ_INT(contprof_start(&o), 0);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, worker_thread, NULL);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  CHECK_EQ_INT(contprof_flush(), 0);
  CHECK_EQ_INT(contprof_stop(), 0);

  pprof_profile *profiles[4];
  size_t n = read_profiles(dir, profiles, 4, NULL);
  CHECK(n >= 1);
  int64_t labeled = 0, nested = 0, unlabeled = 0, wrong = 0;
  for (size_t f = 0; f < n; f++) {
    pprof_profile *p = profiles[f];
    int count = pprof_sample_type_index(p, "cpu-samples");
    CHECK(count >= 0);
    for (size_t i = 0; count >= 0 && i < p->n_sample; i++) {
      const Perftools__Profiles__Sample *s = p->sample[i];
      int64_t v = s->value[count];
      int ep = has_label(p, s, "endpoint", "/checkout");
      int cust = has_label(p, s, "customer", "acme");
      if (pprof_sample_has_function(p, s, "nested_work")) {
        nested += v;
        wrong += !(ep && cust) ? v : 0;
      } else if (pprof_sample_has_function(p, s, "labeled_work")) {
        labeled += v;
        wrong += !ep || cust ? v : 0;
      } else if (pprof_sample_has_function(p, s, "unlabeled_work")) {
        unlabeled += v;
        wrong += ep || cust ? v : 0;
      }
      if (pprof_sample_has_function(p, s, "worker_thread"))
        CHECK(pprof_sample_label(p, s, "thread id") != NULL);
    }
    pprof_profile_free(p);
  }
  printf("labeled %lld nested %lld unlabeled %lld wrong %lld\n",
         (long long)labeled, (long long)nested, (long long)unlabeled,
         (long long)wrong);
  /* 2 threads x 60 x (14 + 5 + 7 ms) at 250 Hz: about 390 + 150 + 210. */
  CHECK(labeled > 200 && nested > 75 && unlabeled > 100);
  CHECK_EQ_INT(wrong, 0);
  remove_dir(dir);
}

static void test_unwritable_directory(void) {
  /* A regular file where the directory should be: writes must fail. */
  char path[] = "/tmp/contprof-notadir-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  char dir[256];
  snprintf(dir, sizeof dir, "%s/profiles", path);
  fflush(stderr);
  int saved = dup(2);
  char log[] = "/tmp/contprof-log-XXXXXX";
  int logfd = mkstemp(log);
  dup2(logfd, 2);
  contprof_options o = {.output_dir = dir, .upload_period_s = 3600};
  int rc = contprof_start(&o);
  burn(20000000);
  int f1 = contprof_flush();
  burn(20000000);
  int f2 = contprof_flush();
  int st = contprof_stop();
  dup2(saved, 2);
  close(saved);
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(f1, 0);
  CHECK_EQ_INT(f2, 0);
  CHECK_EQ_INT(st, 0);
  char buf[4096];
  lseek(logfd, 0, SEEK_SET);
  ssize_t len = read(logfd, buf, sizeof buf - 1);
  buf[len > 0 ? len : 0] = 0;
  close(logfd);
  unlink(log);
  unlink(path);
  int lines = 0;
  for (char *c = buf; *c; c++)
    lines += *c == '\n';
  /* Three failed periods, one message. */
  CHECK_EQ_INT(lines, 1);
  CHECK(strncmp(buf, "contprof: ", 10) == 0);
  CHECK(strstr(buf, dir) != NULL || strstr(buf, path) != NULL);
}

__attribute__((noinline)) void allocate_in_span(void) {
  for (int i = 0; i < 2000; i++) {
    void *p = malloc(4096);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
  }
  KEEP_FRAME();
}

/* Allocation samples carry the span ids set on their thread. */
static void test_span_ids_on_allocation_samples(void) {
  /* The sanitizer's malloc comes before libcontprof.so's in the lookup
   * order of a program linked with both: no allocation samples. */
  SKIP_IF_SANITIZED("the sanitizer's malloc precedes libcontprof's");
  char *dir = make_temp_dir("span-alloc");
  setenv("CONTPROF_ALLOC_SAMPLE_BYTES", "4096", 1);
  contprof_options o = {
      .output_dir = dir, .upload_period_s = 3600, .profiles = "alloc"};
  CHECK_EQ_INT(contprof_start(&o), 0);
  unsetenv("CONTPROF_ALLOC_SAMPLE_BYTES");
  contprof_set_span(77, 88);
  allocate_in_span();
  contprof_set_span(0, 0);
  CHECK_EQ_INT(contprof_stop(), 0);
  pprof_profile *profiles[4];
  size_t n = read_profiles(dir, profiles, 4, NULL);
  CHECK(n >= 1);
  int64_t in_span = 0, wrong = 0;
  for (size_t f = 0; f < n; f++) {
    pprof_profile *p = profiles[f];
    int idx = pprof_sample_type_index(p, "alloc-samples");
    CHECK(idx >= 0);
    for (size_t i = 0; idx >= 0 && i < p->n_sample; i++) {
      const Perftools__Profiles__Sample *s = p->sample[i];
      if (!pprof_sample_has_function(p, s, "allocate_in_span"))
        continue;
      const Perftools__Profiles__Label *span =
          pprof_sample_label(p, s, "span id");
      const Perftools__Profiles__Label *root =
          pprof_sample_label(p, s, "local root span id");
      in_span += s->value[idx];
      wrong += !(span && span->num == 77 && root && root->num == 88);
    }
    pprof_profile_free(p);
  }
  /* 2000 x 4 KiB at a 4 KiB mean: about 1260 samples. */
  CHECK(in_span > 500);
  CHECK_EQ_INT(wrong, 0);
  remove_dir(dir);
}

/* Each start makes the profiler's own threads, which are never sampled nor
 * given a CPU clock. Their thread ids used to stay on a list of 16 after
 * they ended: after a few restarts it was full, and a rescan announced the
 * next start's threads as the application's (each got a CPU clock). After
 * 12 restarts and a rescan (the tick, once a second), the profile still
 * counts one thread with a CPU clock: the program's. */
static void test_restarts_sample_only_the_application(void) {
  char *dir = make_temp_dir("restarts");
  contprof_options o = {.output_dir = dir,
                        .upload_period_s = 3600,
                        .cpu_hz = 100,
                        .profiles = "cpu,wall"};
  for (int i = 0; i < 12; i++) {
    CHECK_EQ_INT(contprof_start(&o), 0);
    CHECK_EQ_INT(contprof_stop(), 0);
  }
  remove_dir(dir);
  dir = make_temp_dir("restarts");
  o.output_dir = dir;
  CHECK_EQ_INT(contprof_start(&o), 0);
  burn(1300000000); /* past the first tick's rescan */
  CHECK_EQ_INT(contprof_stop(), 0);
  pprof_profile *p[2];
  size_t n = read_profiles(dir, p, 2, NULL);
  CHECK_EQ_INT(n, 1);
  if (n == 1) {
    const char *clocks = profile_comment(p[0], "cpu_clock_threads");
    unsigned perf = 0, posix = 0;
    CHECK(clocks && sscanf(clocks, "perf:%u,posix:%u", &perf, &posix) == 2);
    printf("  cpu_clock_threads=%s\n", clocks ? clocks : "(none)");
    CHECK_EQ_INT(perf + posix, 1);
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  remove_dir(dir);
}

static double total_seconds(const pprof_profile *p, const char *type) {
  int idx = pprof_sample_type_index(p, type);
  double sum = 0;
  for (size_t i = 0; idx >= 0 && i < p->n_sample; i++)
    sum += (double)p->sample[i]->value[idx];
  return sum / 1e9;
}

static int uploader_threads(void) {
  int n = 0;
  threads_from_proc("contprof-upload", &n, NULL);
  return n;
}

/* Starts the profiler with o into a new directory, returned. */
static char *start_in_new_dir(contprof_options *o) {
  char *dir = make_temp_dir("uploader");
  o->output_dir = dir;
  CHECK_EQ_INT(contprof_start(o), 0);
  return dir;
}

static void free_profiles_and_dir(pprof_profile **p, size_t n, char *dir) {
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  remove_dir(dir);
}

/* The uploader's thread only waits for the period's end: a process that
 * lives less than a second never starts it, and its one profile is written
 * by the thread that stops the profiler; one that lives on, or flushes,
 * gets it. */
static void test_uploader_thread_after_a_second(void) {
  contprof_options o = {
      .upload_period_s = 3600, .cpu_hz = 100, .profiles = "cpu"};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char *dir = start_in_new_dir(&o);
  burn(300000000);
  int early = uploader_threads();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double lived =
      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  CHECK_EQ_INT(contprof_stop(), 0);
  pprof_profile *p[3];
  size_t n = read_profiles(dir, p, 3, NULL);
  CHECK_EQ_INT(n, 1);
  double cpu_s = n == 1 ? total_seconds(p[0], "cpu-time") : 0;
  printf("  lived %.3f s for 0.3 s of CPU: %d uploader threads, 1 profile of "
         "%.3f s of CPU\n",
         lived, early, cpu_s);
  /* Its first tick is at 1 s of the process's life: on a machine loaded
   * enough to stretch 0.3 s of CPU past 0.9 s, the thread may be there. */
  if (lived < 0.9)
    CHECK_EQ_INT(early, 0);
  /* 30 samples expected: 10 are 5.5 standard deviations below. */
  CHECK(cpu_s >= 0.10 && cpu_s <= 0.60);
  free_profiles_and_dir(p, n, dir);

  dir = start_in_new_dir(&o);
  burn(100000000);
  CHECK_EQ_INT(contprof_flush(), 0); /* starts the thread, which exports */
  int flushed = uploader_threads();
  burn(100000000);
  CHECK_EQ_INT(contprof_stop(), 0);
  n = read_profiles(dir, p, 3, NULL);
  printf("  flushed at 0.1 s: %d uploader threads, %zu profiles\n", flushed, n);
  CHECK_EQ_INT(flushed, 1);
  CHECK_EQ_INT(n, 2);
  free_profiles_and_dir(p, n, dir);

  dir = start_in_new_dir(&o);
  struct timespec wait = {2, 500000000}; /* past the tick after 1 s */
  nanosleep(&wait, NULL);
  int later = uploader_threads();
  CHECK_EQ_INT(contprof_stop(), 0);
  printf("  lived 2.5 s: %d uploader threads\n", later);
  CHECK_EQ_INT(later, 1);
  free_profiles_and_dir(p, 0, dir);
}

TEST_MAIN(T(test_lifecycle_errors), T(test_concurrent_lifecycle),
          T(test_uploader_thread_after_a_second),
          T(test_restarts_sample_only_the_application),
          T(test_labels_on_the_right_samples), T(test_unwritable_directory),
          T(test_span_ids_on_allocation_samples))
