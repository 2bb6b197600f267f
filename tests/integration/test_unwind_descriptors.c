/* An application that closes descriptors 3..63 and puts its own sockets and
 * files on those numbers while it is profiled (fd_takeover_workload.c), with
 * CPU samples at 1000 Hz and allocation samples: libunwind 1.6 checked stack
 * addresses by reading and writing a pipe it kept open at one of those
 * numbers, so a sampling handler blocked in read() on the application's
 * socket (the process hung) or read and wrote bytes in its files
 * (docs/security.md, "Descriptors shared with the application"). The run
 * must end by itself, exit 0 with every descriptor intact, and its profile
 * must still hold the work's CPU samples. */
#include <signal.h>
#include <time.h>

#include "harness.h"
#include "test.h"

#define CONTPROF CP_BUILD_DIR "/contprof"
#define WORKLOAD CP_BUILD_DIR "/tests/fd_takeover_workload"
/* Far above the 2.5 s the workload computes: only a hang reaches it. */
#define DEADLINE_S 60

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs argv with stdout to a temporary file read into out; kills it past
 * DEADLINE_S (returns 1 then), else returns 0 with *status and *usage set. */
static int run_with_deadline(char *const argv[], const char *const *env,
                             int *status, struct rusage *usage, char *out,
                             size_t cap) {
  char path[] = "/tmp/contprof-unwind-fd-out-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0)
    return -1;
  unlink(path);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 1);
    close(fd);
    for (; env && *env; env++)
      putenv((char *)*env);
    execv(argv[0], argv);
    _exit(127);
  }
  int hung = 0;
  double start = now_s();
  while (wait4(pid, status, WNOHANG, usage) != pid) {
    if (now_s() - start > DEADLINE_S) {
      kill(pid, SIGKILL);
      waitpid(pid, status, 0);
      hung = 1;
      break;
    }
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  ssize_t n = pread(fd, out, cap - 1, 0);
  out[n > 0 ? n : 0] = 0;
  close(fd);
  return hung;
}

static void test_application_takes_over_descriptors(void) {
  char *files = make_temp_dir("unwind-fd-files");
  char *dir = make_temp_dir("unwind-fd-out");
  CHECK(files != NULL && dir != NULL);
  if (!files || !dir)
    return;
  char *argv[] = {CONTPROF,    "run",      "--hz", "1000",     "--profiles",
                  "cpu,alloc", "--period", "3600", "--output", dir,
                  "--",        WORKLOAD,   files,  "2",        NULL};
  const char *env[] = {"CONTPROF_CPU_HZ=1000",
                       "CONTPROF_ALLOC_SAMPLE_BYTES=65536", NULL};
  int status = 0;
  struct rusage usage;
  memset(&usage, 0, sizeof usage);
  static char out[65536];
  int hung = run_with_deadline(argv, env, &status, &usage, out, sizeof out);
  printf("%s", out);
  if (hung)
    printf("HUNG: killed after %d s\n", DEADLINE_S);
  CHECK_EQ_INT(hung, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(strstr(out, "descriptors intact") != NULL);

  /* The work was profiled: the recursion holds most CPU samples. */
  pprof_profile *p[16];
  size_t n = read_profiles(dir, p, 16, NULL);
  CHECK(n >= 1);
  if (n >= 1) {
    pprof_top top;
    char err[256];
    CHECK_EQ_INT(pprof_top_compute((const pprof_profile *const *)p, n,
                                   "cpu-time", &top, err, sizeof err),
                 0);
    int64_t work = top_cum(&top, "takeover_work");
    double used = rusage_cpu_seconds(&usage);
    printf("cpu-time total %.3f s, takeover_work %.3f s, process CPU %.3f s\n",
           top.total / 1e9, work / 1e9, used);
    /* The samples account for most of the CPU the process used (the
     * threads compute for 2.2 s of wall time each, sharing the machine),
     * and the work for most of the samples (the rest: start and exit). */
    CHECK(top.total / 1e9 >= 0.5 * used);
    CHECK(work >= top.total / 2);
    pprof_top_free(&top);
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  remove_dir(dir);
  remove_dir(files);
}

TEST_MAIN(T(test_application_takes_over_descriptors))
