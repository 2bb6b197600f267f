/* exec under the profiler (CONTPROF_FOLLOW_EXEC): each image of an exec
 * chain profiles itself and none is killed by a sampling signal left
 * pending; not following removes the library from LD_PRELOAD; a failed exec
 * goes on profiling; short-lived children write no empty profile; vfork +
 * exec works; a large environment needs no stack; posix_spawn's children
 * get the same environment and ignored signals as exec's. */
#include <signal.h>

#include "harness.h"
#include "test.h"

#define CONTPROF CP_BUILD_DIR "/contprof"
#define WORKLOAD CP_BUILD_DIR "/tests/workload"
#define EXEC_BIGENV CP_BUILD_DIR "/tests/exec_bigenv"
#define MAX_PROFILES 64

static double seconds_in(const pprof_profile *p, const char *fn) {
  pprof_top top;
  char err[256];
  if (pprof_top_compute(&p, 1, "cpu-time", &top, err, sizeof err) != 0)
    return -1;
  double s = (double)top_cum(&top, fn) / 1e9;
  pprof_top_free(&top);
  return s;
}

/* Runs WORKLOAD args under `contprof run` at 1000 Hz CPU and a 1 ms wall
 * interval (signals all the time) with extra environment env. */
static run_result *run_workload(char *dir, const char *const *env,
                                const char *a1, const char *a2) {
  char *argv[] = {CONTPROF,   "run",        "--hz",     "1000", "--output",
                  dir,        "--profiles", "cpu,wall", "--",   WORKLOAD,
                  (char *)a1, (char *)a2,   NULL};
  const char *base[8] = {"CONTPROF_WALL_INTERVAL_MS=1"};
  size_t n = 1;
  for (; env && *env && n < 7; env++)
    base[n++] = *env;
  base[n] = NULL;
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, base, r), 0);
  return r;
}

/* 40 execs, each while two threads take CPU and wall signals: a pending
 * SIGPROF reaching the next image would kill it before main. */
static void test_exec_chain_is_followed(void) {
  char *dir = make_temp_dir("exec-chain");
  run_result *r = run_workload(dir, NULL, "exec-chain", "40");
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  if (WIFSIGNALED(r->status))
    printf("killed by signal %d\n", WTERMSIG(r->status));
  CHECK(strstr(r->out, "chain done") != NULL);
  pprof_profile *p[MAX_PROFILES];
  static char names[MAX_PROFILES][512];
  size_t n = read_profiles(dir, p, MAX_PROFILES, names);
  /* One profile per image, each with its own runtime-id, one pid. */
  CHECK_EQ_INT(n, 41);
  size_t with_alpha = 0;
  for (size_t i = 0; i < n; i++) {
    const char *rid = profile_comment(p[i], "runtime-id");
    CHECK(rid != NULL);
    CHECK(p[i]->n_sample > 0);
    double alpha = seconds_in(p[i], "work_alpha");
    if (alpha > 0.01)
      with_alpha++;
    else
      printf("image %zu (%s): work_alpha %.3f s of CPU\n", i, names[i], alpha);
    for (size_t j = 0; j < i && rid; j++) {
      const char *other = profile_comment(p[j], "runtime-id");
      CHECK(other && strcmp(rid, other) != 0);
    }
    if (i > 0)
      CHECK_EQ_STR(profile_comment(p[i], "process_id"),
                   profile_comment(p[0], "process_id"));
  }
  /* Each image burns 30 ms in work_alpha on its main thread. Rarely (about
   * one image in 200 on the kernel of our CI, 6.18) no CPU-timer signal
   * reaches an image just exec'd although its timers were created: the
   * share is checked, not every image. */
  printf("%zu of %zu images have work_alpha's CPU time\n", with_alpha, n);
  CHECK(with_alpha >= n * 9 / 10);
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  free(r);
  remove_dir(dir);
}

/* How many times needle occurs in text. */
static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

static void test_exec_not_followed(void) {
  char *dir = make_temp_dir("exec-off");
  const char *env[] = {"CONTPROF_FOLLOW_EXEC=0", NULL};
  run_result *r = run_workload(dir, env, "exec-chain", "3");
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  CHECK(strstr(r->out, "chain done") != NULL);
  pprof_profile *p[MAX_PROFILES];
  size_t n = read_profiles(dir, p, MAX_PROFILES, NULL);
  CHECK_EQ_INT(n, 1); /* the first image only */
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  free(r);
  remove_dir(dir);

  /* The exec'd program's LD_PRELOAD no longer names the library, nor the
   * children's of posix_spawn (given the environment the process started
   * with, LD_PRELOAD as it came), system() and popen() (the process's own
   * environment, which lost it at start); followed (the default), each
   * does. */
  dir = make_temp_dir("exec-env");
  char *exec[] = {
      CONTPROF, "run",     "--output", dir,
      "--",     "/bin/sh", "-c",       "exec " WORKLOAD " print-preload",
      NULL};
  char *spawn[] = {CONTPROF, "run",    "--output",      dir,
                   "--",     WORKLOAD, "spawn-preload", NULL};
  char **runs[] = {exec, spawn};
  for (size_t i = 0; i < 2; i++) {
    r = calloc(1, sizeof *r);
    CHECK_EQ_INT(run_command(runs[i], env, r), 0);
    CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
    int children = i == 0 ? 1 : 3;
    CHECK_EQ_INT(count_of(r->out, "LD_PRELOAD=["), children);
    CHECK(strstr(r->out, "libcontprof") == NULL);
    free(r);
    r = calloc(1, sizeof *r);
    CHECK_EQ_INT(run_command(runs[i], NULL, r), 0);
    CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
    CHECK_EQ_INT(count_of(r->out, "libcontprof_preload"), children);
    free(r);
  }
  remove_dir(dir);
}

/* A signal the application ignores and we handle (SIGIO, guarded once the
 * CPU sampler moved to a real-time signal) reaches the new image ignored,
 * as exec leaves an ignored signal without us; a failed exec gives our
 * handler back, and the application reads SIG_IGN throughout. */
static void test_exec_keeps_an_ignored_signal_ignored(void) {
  char *dir = make_temp_dir("exec-ign");
  run_result *r = run_workload(dir, NULL, "exec-ignoring", NULL);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  CHECK(strstr(r->out, "after_failed_exec=ignored sigio_caught=1") != NULL);
  const char *line = strstr(r->out, "SigIgn:");
  unsigned long long ign = 0;
  CHECK(line && sscanf(line, "SigIgn: %llx", &ign) == 1);
  CHECK(ign & (1ull << (SIGIO - 1)));
  free(r);
  remove_dir(dir);
}

/* The same through posix_spawn and posix_spawnp, whose child execs inside
 * the C library and resets every handled signal to the default: each child
 * has SIGIO ignored, also while another thread spawns, and the parent gets
 * the profiler's handler back. (The handlers come back with the last of
 * concurrent spawns: one thread's end between another's start and its
 * clone, a window of microseconds, is not caught here: 3 runs without
 * that count passed too.) */
static void test_spawn_keeps_an_ignored_signal_ignored(void) {
  char *dir = make_temp_dir("spawn-ign");
  run_result *r = run_workload(dir, NULL, "spawn-ignoring", NULL);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  CHECK(strstr(r->out, "after_spawn=ignored sigio_caught=1") != NULL);
  int children = 0;
  for (const char *line = strstr(r->out, "SigIgn:"); line;
       line = strstr(line + 1, "SigIgn:")) {
    unsigned long long ign = 0;
    CHECK(sscanf(line, "SigIgn: %llx", &ign) == 1);
    CHECK(ign & (1ull << (SIGIO - 1)));
    children++;
  }
  CHECK_EQ_INT(children, 42); /* 2, then 2 threads' 20 at once */
  if (children != 42)
    printf("%s\n", r->out);
  free(r);
  remove_dir(dir);
}

/* The profile up to the exec is written; profiling goes on after it fails
 * and the rest is in the last profile. */
static void test_failed_exec_keeps_profiling(void) {
  char *dir = make_temp_dir("exec-fail");
  run_result *r = run_workload(dir, NULL, "exec-fail", NULL);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  CHECK(strstr(r->out, "exec=-1 errno=ENOENT") != NULL);
  pprof_profile *p[MAX_PROFILES];
  size_t n = read_profiles(dir, p, MAX_PROFILES, NULL);
  CHECK_EQ_INT(n, 2);
  double alpha = 0, beta = 0;
  for (size_t i = 0; i < n; i++) {
    alpha += seconds_in(p[i], "work_alpha");
    beta += seconds_in(p[i], "work_beta");
    pprof_profile_free(p[i]);
  }
  /* 200 ms each at 1000 Hz: 200 samples, a 7% standard error. */
  CHECK_NEAR(alpha, 0.2, 0.06);
  CHECK_NEAR(beta, 0.2, 0.06);
  free(r);
  remove_dir(dir);
}

/* A shell running 100 short commands: every image is profiled, and those
 * that did not live long enough for a sample write nothing. */
static void test_short_lived_children_write_no_empty_profile(void) {
  char *dir = make_temp_dir("exec-short");
  char *argv[] = {CONTPROF,
                  "run",
                  "--output",
                  dir,
                  "--",
                  "/bin/sh",
                  "-c",
                  "i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); "
                  "done",
                  NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, NULL, r), 0);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  pprof_profile *p[128];
  size_t n = read_profiles(dir, p, 128, NULL);
  printf("100 short children: %zu profiles\n", n);
  for (size_t i = 0; i < n; i++) {
    CHECK(p[i]->n_sample > 0);
    pprof_profile_free(p[i]);
  }
  free(r);
  remove_dir(dir);
}

/* vfork + exec while sampled: the vfork child shares the parent's memory
 * and must leave the profiler alone. The parent goes on profiling through
 * 200 of them: its main thread's 200 x 2 ms in work_alpha are all in its
 * profile, under its own thread id. (A child that took itself for the
 * parent stopped the parent's profiler: under load, its profile was lost.) */
static void test_vfork_exec(void) {
  char *dir = make_temp_dir("vfork");
  run_result *r = run_workload(dir, NULL, "vfork-exec", "200");
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  CHECK(strstr(r->out, "vfork_ok=200") != NULL);
  /* Each /bin/true that got a CPU sample (1000 Hz) wrote a profile too:
   * up to one per child. */
  enum { MAX_VFORK_PROFILES = 256 };
  static pprof_profile *p[MAX_VFORK_PROFILES];
  static char names[MAX_VFORK_PROFILES][512];
  size_t n = read_profiles(dir, p, MAX_VFORK_PROFILES, names);
  size_t parents = 0;
  for (size_t i = 0; i < n; i++) {
    if (!strstr(names[i], "/workload."))
      continue; /* a /bin/true that lived long enough for a sample */
    parents++;
    /* 400 samples at 1000 Hz: a 5% standard error; 25% is 5 of them. */
    double alpha = seconds_in(p[i], "work_alpha");
    printf("parent: work_alpha %.3f s of CPU (0.4 s burnt)\n", alpha);
    CHECK_NEAR(alpha, 0.4, 0.1);
    const char *pid = profile_comment(p[i], "process_id");
    CHECK(pid != NULL);
    size_t foreign = 0;
    for (size_t j = 0; pid && j < p[i]->n_sample; j++) {
      const Perftools__Profiles__Sample *s = p[i]->sample[j];
      const Perftools__Profiles__Label *tid =
          pprof_sample_label(p[i], s, "thread id");
      if (pprof_sample_has_function(p[i], s, "work_alpha") &&
          (!tid || tid->num != atoll(pid)))
        foreign++;
    }
    CHECK_EQ_INT(foreign, 0);
  }
  CHECK_EQ_INT(parents, 1);
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  free(r);
  remove_dir(dir);
}

/* Exits 3 if the LD_PRELOAD the shell was given still names the library
 * (/proc: with CONTPROF_FOLLOW_EXEC=0 the shell's own start would take it
 * out of $LD_PRELOAD). */
#define NOT_PRELOADED                                                          \
  "tr '\\0' '\\n' </proc/$$/environ | grep -q '^LD_PRELOAD=.*libcontprof' "    \
  "&& exit 3; exit 0"

static run_result *run_bigenv(char *dir, const char *const *env,
                              char *const *args) {
  char *argv[16] = {CONTPROF, "run", "--output", dir, "--", EXEC_BIGENV};
  size_t n = 6;
  for (; *args && n < 15; args++)
    argv[n++] = *args;
  argv[n] = NULL;
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, env, r), 0);
  if (WIFSIGNALED(r->status))
    printf("exec_bigenv %s: killed by signal %d\n", argv[6],
           WTERMSIG(r->status));
  return r;
}

/* A thread with a 128 KiB stack execs with 20,000 more environment
 * variables: the hooks took 8 bytes of its stack per variable plus 4 KiB
 * (160 KB) and crashed it. Followed, the environment is passed on as is;
 * not followed, its copy without the library is not on the stack either,
 * and the copies 100 vfork children leave in the address space they share
 * with the parent are unmapped (100 x 160 KB otherwise). */
static void test_exec_big_environment_small_stack(void) {
  char *dir = make_temp_dir("exec-bigenv");
  char *followed[] = {"exec", "/bin/true", NULL};
  run_result *r = run_bigenv(dir, NULL, followed);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  free(r);

  const char *off[] = {"CONTPROF_FOLLOW_EXEC=0", NULL};
  char *stripped[] = {"exec", "/bin/sh", "-c", NOT_PRELOADED, NULL};
  r = run_bigenv(dir, off, stripped);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  free(r);

  /* What is measured is the copies' memory: not the debug information
   * the profiler reads after its first drains (docs/symbols.md, "fork"),
   * up to 18 MB here (libc's, from libc6-dbg) if it falls in the loop. */
  const char *off_no_lines[] = {"CONTPROF_FOLLOW_EXEC=0",
                                "CONTPROF_DWARF_MAX_MB=1", NULL};
  char *vforked[] = {"vfork", "100", "/bin/sh", "-c", NOT_PRELOADED, NULL};
  r = run_bigenv(dir, off_no_lines, vforked);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  int ok = -1;
  long growth_kb = -1;
  const char *line = strstr(r->out, "ok=");
  CHECK(line && sscanf(line, "ok=%d anon_growth_kb=%ld", &ok, &growth_kb) == 2);
  printf("vfork: %d of 100 children ok, anonymous memory %+ld KiB\n", ok,
         growth_kb);
  CHECK_EQ_INT(ok, 100);
  CHECK(growth_kb < 4096);
  free(r);
  remove_dir(dir);
}

TEST_MAIN(T(test_exec_chain_is_followed), T(test_exec_not_followed),
          T(test_failed_exec_keeps_profiling),
          T(test_exec_keeps_an_ignored_signal_ignored),
          T(test_spawn_keeps_an_ignored_signal_ignored),
          T(test_short_lived_children_write_no_empty_profile),
          T(test_vfork_exec), T(test_exec_big_environment_small_stack))
