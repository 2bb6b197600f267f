/* Hostile programs (hostile_workload.c) run alone and under `contprof run`
 * with every profile on at high rates (CPU 1000 Hz, wall every 1 ms, an
 * allocation sample every 64 KiB, lock waits from 10 us): signals they use
 * or block, alternate stacks, blocking calls that must not fail with EINTR,
 * their own SIGSEGV handler, every way of ending, exit during a profile
 * upload, and dlopen/dlclose in a loop. Each must behave exactly as without
 * the profiler (same output, exit status or death signal; the two runs go
 * side by side), never hang (each run has a deadline and is killed past it),
 * and, where the process ends through exit(), leave a last profile that
 * decodes. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <time.h>

#include "harness.h"
#include "test.h"

#define CONTPROF CP_BUILD_DIR "/contprof"
#define HOSTILE CP_BUILD_DIR "/tests/hostile_workload"
#define PLUGIN CP_BUILD_DIR "/tests/libcp_test_plugin.so"
#define DEADLINE_S 30

typedef struct outcome {
  int status;
  int timed_out;
  double seconds;
  char out[65536];
} outcome;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Starts argv with stdout to a fresh temporary file (*out_fd) and no core
 * dumps; returns its pid. */
static pid_t spawn(char *const argv[], const char *const *env, int *out_fd) {
  char path[] = "/tmp/contprof-hardening-out-XXXXXX";
  *out_fd = mkstemp(path);
  if (*out_fd < 0)
    return -1;
  unlink(path);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(*out_fd, 1);
    close(*out_fd);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    for (; env && *env; env++)
      putenv((char *)*env);
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

/* Runs the two commands at once (each program alone would leave one of the
 * two cores idle); kills what has not ended within DEADLINE_S (timed_out). */
static void run_both(char *const argv_a[], const char *const *env_a, outcome *a,
                     char *const argv_b[], const char *const *env_b,
                     outcome *b) {
  outcome *o[2] = {a, b};
  int fd[2];
  memset(a, 0, sizeof *a);
  memset(b, 0, sizeof *b);
  double start = now_s();
  pid_t pid[2] = {spawn(argv_a, env_a, &fd[0]), spawn(argv_b, env_b, &fd[1])};
  int running = (pid[0] > 0) + (pid[1] > 0);
  for (int i = 0; i < 2; i++)
    if (pid[i] <= 0)
      o[i]->timed_out = -1;
  while (running) {
    for (int i = 0; i < 2; i++)
      if (pid[i] > 0 && waitpid(pid[i], &o[i]->status, WNOHANG) == pid[i]) {
        o[i]->seconds = now_s() - start;
        pid[i] = 0;
        running--;
      }
    if (running && now_s() - start > DEADLINE_S) {
      for (int i = 0; i < 2; i++)
        if (pid[i] > 0) {
          kill(pid[i], SIGKILL);
          waitpid(pid[i], &o[i]->status, 0);
          o[i]->timed_out = 1;
          o[i]->seconds = now_s() - start;
          pid[i] = 0;
          running--;
        }
    }
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; i < 2; i++) {
    if (fd[i] < 0)
      continue;
    ssize_t n = pread(fd[i], o[i]->out, sizeof o[i]->out - 1, 0);
    o[i]->out[n > 0 ? n : 0] = 0;
    close(fd[i]);
  }
}

/* The output without its "info " lines (measurements that may differ). */
static void without_info(const char *in, char *out, size_t cap) {
  size_t n = 0;
  while (*in) {
    const char *eol = strchr(in, '\n');
    size_t len = eol ? (size_t)(eol - in) + 1 : strlen(in);
    if (strncmp(in, "info ", 5) != 0 && n + len < cap) {
      memcpy(out + n, in, len);
      n += len;
    }
    in += len;
  }
  out[n] = 0;
}

static void describe(const char *what, const outcome *o) {
  if (o->timed_out)
    printf("  %s: HUNG (killed after %d s)\n", what, DEADLINE_S);
  else if (WIFEXITED(o->status))
    printf("  %s: exit %d in %.2f s\n", what, WEXITSTATUS(o->status),
           o->seconds);
  else if (WIFSIGNALED(o->status))
    printf("  %s: killed by signal %d in %.2f s\n", what, WTERMSIG(o->status),
           o->seconds);
}

static const char *const high_rates[] = {"CONTPROF_WALL_INTERVAL_MS=1",
                                         "CONTPROF_ALLOC_SAMPLE_BYTES=65536",
                                         "CONTPROF_LOCK_SAMPLE_NS=10000", NULL};

typedef struct scenario {
  char *args[6];          /* the workload's arguments */
  const char *expect;     /* a line its output must contain, or NULL */
  int profile_expected;   /* the process ends through exit(): a last profile */
  const char *const *env; /* for the profiled run; NULL: high_rates */
  const char *period;     /* --period; NULL: 3600 */
} scenario;

/* Runs a scenario alone and profiled; checks they behave the same. Returns
 * the profiled outcome (caller frees) and leaves its profiles in dir. */
static outcome *run_scenario(const scenario *sc, const char *dir,
                             outcome **baseline_out) {
  char *plain[8] = {HOSTILE};
  char *profiled[24] = {
      CONTPROF,     "run",
      "--hz",       "1000",
      "--profiles", "cpu,wall,alloc,heap,lock",
      "--period",   (char *)(sc->period ? sc->period : "3600"),
      "--output",   (char *)dir,
      "--",         HOSTILE};
  for (int i = 0; sc->args[i]; i++) {
    plain[1 + i] = sc->args[i];
    profiled[12 + i] = sc->args[i];
  }
  printf("%s %s %s\n", sc->args[0], sc->args[1] ? sc->args[1] : "",
         sc->args[1] && sc->args[2] ? sc->args[2] : "");
  outcome *base = calloc(1, sizeof *base), *prof = calloc(1, sizeof *prof);
  run_both(plain, high_rates, base, profiled, sc->env ? sc->env : high_rates,
           prof);
  describe("alone   ", base);
  describe("profiled", prof);
  CHECK(!base->timed_out);
  CHECK(!prof->timed_out);
  /* The same ending: exit status, or death signal. */
  CHECK_EQ_INT(WIFEXITED(prof->status), WIFEXITED(base->status));
  if (WIFEXITED(base->status))
    CHECK_EQ_INT(WEXITSTATUS(prof->status), WEXITSTATUS(base->status));
  CHECK_EQ_INT(WIFSIGNALED(prof->status), WIFSIGNALED(base->status));
  if (WIFSIGNALED(base->status))
    CHECK_EQ_INT(WTERMSIG(prof->status), WTERMSIG(base->status));
  /* The same output. */
  static char a[65536], b[65536];
  without_info(base->out, a, sizeof a);
  without_info(prof->out, b, sizeof b);
  CHECK_EQ_STR(b, a);
  if (sc->expect) {
    CHECK(strstr(a, sc->expect) != NULL);
    CHECK(strstr(b, sc->expect) != NULL);
  }
  if (strcmp(a, b) != 0 || (sc->expect && !strstr(b, sc->expect)))
    printf("alone:\n%s\nprofiled:\n%s\n", base->out, prof->out);
  if (baseline_out)
    *baseline_out = base;
  else
    free(base);
  return prof;
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    n += len > 6 && strcmp(e->d_name + len - 6, ".pb.gz") == 0;
  }
  if (d)
    closedir(d);
  return n;
}

/* Every profile in dir decodes; returns how many there are, and the CPU
 * time they hold (ns) in *cpu_ns. */
static int check_profiles(const char *dir, int64_t *cpu_ns) {
  pprof_profile *p[64];
  int files = count_files(dir);
  size_t n = read_profiles(dir, p, 64, NULL);
  CHECK_EQ_INT((int)n, files < 64 ? files : 64);
  *cpu_ns = 0;
  if (n) {
    pprof_top top;
    char err[256];
    if (pprof_top_compute((const pprof_profile *const *)p, n, "cpu-time", &top,
                          err, sizeof err) == 0) {
      *cpu_ns = top.total;
      pprof_top_free(&top);
    }
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  return (int)n;
}

static void scenario_test(const scenario *sc) {
  char *dir = make_temp_dir("hardening");
  outcome *o = run_scenario(sc, dir, NULL);
  int64_t cpu = 0;
  int n = check_profiles(dir, &cpu);
  printf("  %d profile(s), %.3f s of CPU sampled\n", n, (double)cpu / 1e9);
  if (sc->profile_expected) {
    /* The last profile was written at exit and holds the work. */
    CHECK(n >= 1);
    CHECK(cpu > 0);
  }
  free(o);
  remove_dir(dir);
}

/* --- signals ---------------------------------------------------------------
 */

static void test_threads_blocking_every_signal(void) {
  scenario sc = {.args = {"sigblock"},
                 .expect = "sigtimedwait=1 sigwaitinfo=1 signalfd=1",
                 .profile_expected = 1};
  scenario_test(&sc);
}

/* The alternate stack used, and how deep the application's handler was while
 * it computed (where sampling signals interrupt it). */
static long info_value(const char *out, const char *format) {
  const char *p = strstr(out, "info ");
  long a = -1, b = -1;
  for (; p; p = strstr(p + 1, "info "))
    if (sscanf(p, format, &a, &b) >= 1)
      return b >= 0 ? b : a;
  return -1;
}

static void altstack_scenario(const char *size, const char *how) {
  char *dir = make_temp_dir("altstack");
  scenario sc = {.args = {"altstack", (char *)size, (char *)how},
                 .expect = "below_written=0",
                 .profile_expected = 1};
  outcome *base = NULL;
  outcome *o = run_scenario(&sc, dir, &base);
  long alone = info_value(base->out, "info altstack %ld bytes: %ld used");
  long profiled = info_value(o->out, "info altstack %ld bytes: %ld used");
  long depth = info_value(o->out, "info computing at %ld bytes deep");
  printf("  alternate stack used: %ld bytes alone, %ld profiled; the "
         "application computes %ld bytes deep\n",
         alone, profiled, depth);
  int64_t cpu = 0;
  CHECK(check_profiles(dir, &cpu) == 1 && cpu > 0);
  free(base);
  free(o);
  remove_dir(dir);
}

/* An application handler on an alternate stack (SA_ONSTACK): our signals are
 * blocked while it runs (signals.c), so the profiler's handler never runs
 * on that stack, however small. Installed with the raw system call instead
 * (signals.c never sees it), our handler runs there and, with less than
 * CP_UNWIND_STACK_NEED left, records the leaf only instead of unwinding.
 * Nothing below the stack may be written in any case. Sizes: a roomy 64 KiB
 * (the raw run shows what the profiler's signal frame and handler take on
 * top: 5 to 7.5 KiB more than the application), SIGSTKSZ as this libc
 * defines it (sysconf), the legacy 8 KiB constant old binaries carry, and
 * for the raw case two kernel signal frames plus 4 KiB (10.6 KiB with
 * AVX-512): room for the application's handler and our signal frame, not
 * for the unwinder. (Not 8 KiB raw: there the application's handler takes
 * 6 KiB and even our signal frame would not fit; the kernel kills the
 * process, see docs/signals.md.) */
static void test_sigaltstack(void) {
  char sigstksz[32], two_frames[32];
  snprintf(sigstksz, sizeof sigstksz, "%ld", sysconf(_SC_SIGSTKSZ));
  unsigned long frame = getauxval(AT_MINSIGSTKSZ);
  snprintf(two_frames, sizeof two_frames, "%lu",
           frame ? 2 * frame + 4096 : 16384);
  altstack_scenario("65536", NULL);
  altstack_scenario("65536", "raw");
  altstack_scenario(sigstksz, NULL);
  altstack_scenario("8192", NULL);
  altstack_scenario(two_frames, "raw");
}

static void test_no_eintr_from_sampling(void) {
  scenario sc = {
      .args = {"eintr"}, .expect = "eintr failures=0", .profile_expected = 1};
  scenario_test(&sc);
}

static void test_thread_storm(void) {
  scenario sc = {.args = {"thread-storm"},
                 .expect = "storm created=400 wrong=0",
                 .profile_expected = 1};
  scenario_test(&sc);
}

static void test_own_sigsegv_handler(void) {
  scenario sc = {.args = {"segv"},
                 .expect = "recovered=10000 wrong_addr=0",
                 .profile_expected = 1};
  scenario_test(&sc);
}

/* --- exit paths ------------------------------------------------------------
 */

static void test_exit_paths(void) {
  /* exit() and return from main run the exit handlers, and _exit's hook
   * stops the profiler first (while the workers compute): the last profile
   * is written. abort and fatal signals end the process at once: no profile
   * is expected (none could be written safely), only the same status. */
  const scenario all[] = {
      {.args = {"exit", "3"}, .expect = NULL, .profile_expected = 1},
      {.args = {"return", "4"}, .expect = NULL, .profile_expected = 1},
      {.args = {"_exit", "5"}, .expect = NULL, .profile_expected = 1},
      {.args = {"abort"}, .expect = NULL, .profile_expected = 0},
      {.args = {"segv-default"}, .expect = NULL, .profile_expected = 0},
      {.args = {"sigkill"}, .expect = NULL, .profile_expected = 0},
      {.args = {"sigterm"}, .expect = NULL, .profile_expected = 0},
      {.args = {"thread-exit", "6"}, .expect = NULL, .profile_expected = 1},
      {.args = {"exit-in-malloc", "7"}, .expect = NULL, .profile_expected = 1},
      {.args = {"exit-in-flush", "8"}, .expect = NULL, .profile_expected = 1},
  };
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    scenario_test(&all[i]);
}

/* A Pyroscope server that accepts connections (the kernel does, into the
 * backlog) and never answers: the upload at the end of each 1 s period
 * hangs, and exit must still come within CONTPROF_EXIT_TIMEOUT (1 s) rather
 * than the upload timeout (60 s), with the file sink's last profile. */
static void test_exit_during_upload(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  CHECK(bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
        listen(fd, 64) == 0 &&
        getsockname(fd, (struct sockaddr *)&addr, &len) == 0);
  char server[96];
  snprintf(server, sizeof server,
           "PYROSCOPE_SERVER_ADDRESS=http://127.0.0.1:%d",
           ntohs(addr.sin_port));
  const char *env[] = {"CONTPROF_WALL_INTERVAL_MS=1",
                       "CONTPROF_ALLOC_SAMPLE_BYTES=65536",
                       "CONTPROF_LOCK_SAMPLE_NS=10000",
                       "CONTPROF_EXPORT=file,pyroscope",
                       "CONTPROF_EXIT_TIMEOUT=1s",
                       "CONTPROF_UPLOAD_TIMEOUT=60s",
                       server,
                       NULL};
  char *dir = make_temp_dir("upload");
  scenario sc = {.args = {"exit-after", "2.5", "9"},
                 .expect = NULL,
                 .profile_expected = 1,
                 .env = env,
                 .period = "1"};
  outcome *o = run_scenario(&sc, dir, NULL);
  /* 2.5 s of work, at most 1 s of exit timeout: well under the 60 s an
   * upload may take (a generous bound, not a timing measurement). */
  CHECK(o->seconds < 15);
  int64_t cpu = 0;
  int n = check_profiles(dir, &cpu);
  printf("  %d profile file(s), %.3f s of CPU sampled\n", n, (double)cpu / 1e9);
  CHECK(n >= 2);
  CHECK(cpu > 0);
  free(o);
  remove_dir(dir);
  close(fd);
}

/* --- dlopen -----------------------------------------------------------------
 */

static void test_dlopen_dlclose_loop(void) {
  char *dir = make_temp_dir("dlopen-loop");
  scenario sc = {.args = {"dlopen", PLUGIN, "3000"},
                 .expect = "dlopen rounds=6000 failures=0",
                 .profile_expected = 1};
  outcome *o = run_scenario(&sc, dir, NULL);
  pprof_profile *p[8];
  size_t n = read_profiles(dir, p, 8, NULL);
  CHECK_EQ_INT((int)n, 1);
  if (n) {
    pprof_top top;
    char err[256];
    CHECK_EQ_INT(pprof_top_compute((const pprof_profile *const *)p, n,
                                   "cpu-time", &top, err, sizeof err),
                 0);
    /* 6000 calls x 100 us of CPU in the plugin: about 0.6 s, 600 samples at
     * 1000 Hz. Symbolized by name (its static function too), whatever
     * address each load had; a quarter of it is plenty to tell. */
    double in_plugin = (double)top_cum(&top, "plugin_work") / 1e9;
    double in_static = (double)top_cum(&top, "plugin_static_spin") / 1e9;
    printf("  plugin_work %.3f s, plugin_static_spin %.3f s, total %.3f s\n",
           in_plugin, in_static, (double)top.total / 1e9);
    CHECK(in_plugin > 0.1);
    CHECK(in_static > 0.1);
    pprof_top_free(&top);
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  free(o);
  remove_dir(dir);
}

/* Three threads that do nothing but dlopen and dlclose, CPU samples at
 * 1000 Hz and wall samples every 1 ms: the loader holds its write lock as
 * often as it can. A handler that caught a thread holding it, or between
 * its lock word and its owner, and unwound with libunwind (which takes that
 * lock again through dl_iterate_phdr) deadlocked the process in about 1 run
 * in 6 of 5,000 rounds, before the loader said so in _r_debug. Each run
 * here has about that chance to catch a regression. */
static void test_dlopen_tight_loop(void) {
  char *dir = make_temp_dir("dlopen-tight");
  scenario sc = {.args = {"dlopen-tight", PLUGIN, "4000"},
                 .expect = "dlopen-tight rounds=12000 failures=0",
                 .profile_expected = 1};
  free(run_scenario(&sc, dir, NULL));
  remove_dir(dir);
}

/* Children forked one after another while the uploader retries every
 * 1-2 ms against a port that refuses: libcurl takes OpenSSL's and the C
 * library's locks at each attempt, and a child forked while one was held
 * waited for it forever in its exit handlers (OpenSSL's, p11-kit's): about
 * 1 child in 3,000 hung here. The attempts' sections are now ones a fork
 * waits out (fork_guard.h). */
static void test_children_exit_beside_uploads(void) {
  char *dir = make_temp_dir("fork-exit");
  const char *env[] = {"DD_TRACE_AGENT_URL=http://127.0.0.1:9",
                       "CONTPROF_EXPORT=datadog",
                       "CONTPROF_RETRY_INITIAL=1ms",
                       "CONTPROF_RETRY_MAX=2ms",
                       "CONTPROF_FOLLOW_FORK=0",
                       "CONTPROF_LOG_LEVEL=error",
                       NULL};
  /* Up to 3,000 children, or as many as 20 s allow: a fork waits for the
   * attempt in progress, and on a slow machine 3,000 forks beside attempts
   * every 1-2 ms took 43 s (14 ms each; 1.3 ms alone). */
  scenario sc = {.args = {"fork-exit", "3000"},
                 .expect = "fork-exit hung=0",
                 .env = env,
                 .period = "1"};
  free(run_scenario(&sc, dir, NULL));
  remove_dir(dir);
}

TEST_MAIN(T(test_threads_blocking_every_signal), T(test_sigaltstack),
          T(test_thread_storm), T(test_no_eintr_from_sampling),
          T(test_own_sigsegv_handler), T(test_exit_paths),
          T(test_exit_during_upload), T(test_dlopen_dlclose_loop),
          T(test_dlopen_tight_loop), T(test_children_exit_beside_uploads))
