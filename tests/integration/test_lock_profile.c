/* Lock contention profiles of programs that measure their own waits, at the
 * default sampling mean: under `contprof run --profiles lock` (LD_PRELOAD)
 * and linked with libcontprof (explicit start). The hot path holds the
 * waiting, the totals match what the program measured, readers and writers
 * of an rwlock are told apart, no profiler code appears in a lock stack, and
 * go tool pprof reads the result. */
#include <inttypes.h>
#include <math.h>

#include "harness.h"
#include "test.h"

#define CONTPROF CP_BUILD_DIR "/contprof"
#define LOCK_WORKLOAD CP_BUILD_DIR "/tests/lock_workload"
#define LOCK_WORKLOAD_LINKED CP_BUILD_DIR "/tests/lock_workload_linked"

typedef struct lock_run {
  run_result r;
  pprof_profile *profiles[8];
  char names[8][512];
  size_t n;
  pprof_top wait, count;
  int ok;
} lock_run;

/* Runs the workload in `mode` for `seconds`, preloaded by `contprof run` or
 * linked; decodes its profiles and computes the lock tops. */
static void run_lock_workload(const char *mode, const char *seconds, int linked,
                              const char *dir, lock_run *lr) {
  memset(lr, 0, sizeof *lr);
  char env_dir[600];
  snprintf(env_dir, sizeof env_dir, "CONTPROF_OUTPUT_DIR=%s", dir);
  const char *env[] = {"CONTPROF_PROFILES=lock", "CONTPROF_UPLOAD_PERIOD=3600",
                       env_dir, NULL};
  char *preload_argv[] = {
      CONTPROF,     "run",           "--profiles", "lock", "--output",
      (char *)dir,  "--period",      "3600",       "--",   LOCK_WORKLOAD,
      (char *)mode, (char *)seconds, NULL};
  char *linked_argv[] = {LOCK_WORKLOAD_LINKED, (char *)mode, (char *)seconds,
                         NULL};
  CHECK_EQ_INT(run_command(linked ? linked_argv : preload_argv,
                           linked ? env : NULL, &lr->r),
               0);
  CHECK(WIFEXITED(lr->r.status) && WEXITSTATUS(lr->r.status) == 0);
  lr->n = read_profiles(dir, lr->profiles, 8, lr->names);
  CHECK_EQ_INT(lr->n, 1);
  if (lr->n == 0)
    return;
  char err[256];
  const pprof_profile *const *p = (const pprof_profile *const *)lr->profiles;
  int rc1 = pprof_top_compute(p, lr->n, "lock-acquire-wait", &lr->wait, err,
                              sizeof err);
  int rc2 =
      pprof_top_compute(p, lr->n, "lock-acquire", &lr->count, err, sizeof err);
  CHECK_EQ_INT(rc1, 0);
  CHECK_EQ_INT(rc2, 0);
  lr->ok = rc1 == 0 && rc2 == 0;
}

static void free_lock_run(lock_run *lr) {
  if (lr->ok) {
    pprof_top_free(&lr->wait);
    pprof_top_free(&lr->count);
  }
  for (size_t i = 0; i < lr->n; i++)
    pprof_profile_free(lr->profiles[i]);
}

/* No frame of the profiler's inside a lock sample's stack: its locks and
 * threads are never recorded, the hooks' frames are cut off at the leaf,
 * and the pthread_create hook's trampoline at the root of the threads is
 * left out (src/passthrough.h). */
static void check_no_profiler_frames(const lock_run *lr) {
  for (size_t i = 0; i < lr->n; i++) {
    const pprof_profile *p = lr->profiles[i];
    int wait = pprof_sample_type_index(p, "lock-acquire-wait");
    CHECK(wait >= 0);
    size_t with_waits = 0;
    for (size_t s = 0; wait >= 0 && s < p->n_sample; s++)
      with_waits += p->sample[s]->value[wait] != 0;
    CHECK(with_waits > 0);
    CHECK_EQ_INT(profiler_frames_inside(p, "lock-acquire-wait", 0, NULL), 0);
  }
}

/* A hot and a barely contended mutex: the hot path holds at least 90% of
 * the wait (the truth is over 99%); each path's wait matches what it
 * measured. 4 threads x 2.5 s make about 7 s of waits of ~300 us: at the
 * 1 ms mean about 6000 are sampled, a relative standard error near 1.5%. */
static void check_hotcold(int linked) {
  char *dir = make_temp_dir("lock-hotcold");
  lock_run *lr = calloc(1, sizeof *lr);
  run_lock_workload("hotcold", "2.5", linked, dir, lr);
  unsigned long long hot = 0, cold = 0;
  CHECK_EQ_INT(sscanf(lr->r.out, "hot_ns=%llu cold_ns=%llu", &hot, &cold), 2);
  if (lr->ok) {
    double total = (double)lr->wait.total;
    double hot_got = (double)top_cum(&lr->wait, "wait_hot_path");
    double cold_got = (double)top_cum(&lr->wait, "wait_cold_path");
    printf("%s: measured hot %.3f s cold %.4f s; profile hot %.3f s cold "
           "%.4f s of %.3f s, %" PRId64 " acquisitions\n",
           linked ? "linked" : "preload", (double)hot / 1e9, (double)cold / 1e9,
           hot_got / 1e9, cold_got / 1e9, total / 1e9, lr->count.total);
    CHECK(total > 0);
    CHECK(hot_got / total >= 0.90);
    CHECK_NEAR(hot_got / (double)hot, 1.0, 0.10);
    /* The leaf is the function that called pthread_mutex_lock. */
    CHECK_NEAR((double)top_flat(&lr->wait, "wait_hot_path") / hot_got, 1.0,
               0.001);
    check_no_profiler_frames(lr);
  }
  free_lock_run(lr);
  free(lr);
  remove_dir(dir);
}

static void test_hot_path_preload(void) { check_hotcold(0); }
static void test_hot_path_linked(void) { check_hotcold(1); }

/* The profile's total wait within 10% of the program's own measurement
 * (half of the waits in pthread_mutex_timedlock), and the acquisition count
 * within 10% of the contended calls it counted; or within 4 standard
 * errors when those are wider (the program computes them from its waits).
 * Idle, some 8,000 waits of about 300 us at the 1 ms mean: 3% for the
 * count. A loaded machine makes fewer waits (3,091 under six ctest jobs on
 * 2 CPUs), longer and so more often kept. */
static void test_total_matches_measured(void) {
  char *dir = make_temp_dir("lock-total");
  lock_run *lr = calloc(1, sizeof *lr);
  run_lock_workload("total", "2.5", 0, dir, lr);
  unsigned long long total = 0, count = 0;
  double var_count = 0, var_ns = 0;
  CHECK_EQ_INT(sscanf(lr->r.out,
                      "total_ns=%llu count=%llu var_count=%lf "
                      "var_ns=%lf",
                      &total, &count, &var_count, &var_ns),
               4);
  if (lr->ok && total > 0 && count > 0) {
    double se_count = sqrt(var_count) / (double)count;
    double se_wait = sqrt(var_ns) / (double)total;
    printf("total: measured %.3f s in %llu waits; profile %.3f s in %" PRId64
           " (standard errors %.1f%% and %.1f%%)\n",
           (double)total / 1e9, count, (double)lr->wait.total / 1e9,
           lr->count.total, 100 * se_wait, 100 * se_count);
    CHECK(count > 500);
    CHECK_NEAR((double)lr->wait.total / (double)total, 1.0,
               fmax(0.10, 4 * se_wait));
    CHECK_NEAR((double)lr->count.total / (double)count, 1.0,
               fmax(0.10, 4 * se_count));

    /* go tool pprof (an independent reader) accepts the file. */
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "HOME=/tmp GOCACHE=/tmp/contprof-gocache go tool pprof "
             "-sample_index=lock-acquire-wait -top %s 2>&1",
             lr->names[0]);
    FILE *p = popen(cmd, "r");
    char buf[8192];
    size_t got = p ? fread(buf, 1, sizeof buf - 1, p) : 0;
    buf[got] = 0;
    int rc = p ? pclose(p) : -1;
    CHECK_EQ_INT(rc, 0);
    CHECK(strstr(buf, "total_wait") != NULL);
    if (rc != 0 || !strstr(buf, "total_wait"))
      fprintf(stderr, "go tool pprof said:\n%s\n", buf);
  }
  free_lock_run(lr);
  free(lr);
  remove_dir(dir);
}

/* Readers and writers of one rwlock: each side's wait matches what it
 * measured. */
static void test_rwlock_readers_writers(void) {
  char *dir = make_temp_dir("lock-rwlock");
  lock_run *lr = calloc(1, sizeof *lr);
  run_lock_workload("rwlock", "2.5", 0, dir, lr);
  unsigned long long rd = 0, wr = 0;
  CHECK_EQ_INT(sscanf(lr->r.out, "read_ns=%llu write_ns=%llu", &rd, &wr), 2);
  if (lr->ok && rd > 0 && wr > 0) {
    double rd_got = (double)top_cum(&lr->wait, "reader_wait");
    double wr_got = (double)top_cum(&lr->wait, "writer_wait");
    printf("rwlock: measured read %.3f s write %.3f s; profile read %.3f s "
           "write %.3f s\n",
           (double)rd / 1e9, (double)wr / 1e9, rd_got / 1e9, wr_got / 1e9);
    CHECK_NEAR(rd_got / (double)rd, 1.0, 0.10);
    CHECK_NEAR(wr_got / (double)wr, 1.0, 0.10);
    check_no_profiler_frames(lr);
  }
  free_lock_run(lr);
  free(lr);
  remove_dir(dir);
}

TEST_MAIN(T(test_hot_path_preload), T(test_hot_path_linked),
          T(test_total_matches_measured), T(test_rwlock_readers_writers))
