/* Programs with known behaviour, run unmodified under `contprof run` by the
 * integration tests:
 *   shares THREADS SECONDS  threads split CPU time about 50/30/20 across three
 *                           functions; prints the true CPU ns of each
 *   exit3                   works briefly, exits with status 3
 *   _exit, _Exit            works 0.3 s in work_alpha, ends with _exit(4) or
 *                           _Exit(5) (no atexit handler runs)
 *   handler-exit            works 0.3 s in work_alpha, then its SIGTERM
 *                           handler ends it with _exit(6)
 *   fault-exit              works 0.3 s in work_alpha, then faults; its
 *                           SIGSEGV handler (SA_NODEFER, on an alternate
 *                           stack) ends it with _exit(8)
 *   longjmp-exit            spins in main until a SIGALRM handler leaves
 *                           with siglongjmp, works 0.3 s in work_alpha,
 *                           ends with _exit(9)
 *   longjmp-handler-exit    a SIGUSR1 handler, raised 32 KiB down the
 *                           stack, leaves with siglongjmp; then a SIGTERM
 *                           handler (raised from main) ends it with _exit(6)
 *   fork-_exit              forks a child that works 0.3 s in work_beta and
 *                           ends with _exit(0); works 0.2 s in work_alpha
 *   vfork-_exit N           N vfork children that end with _exit(0) at once,
 *                           work_alpha 2 ms after each
 *   sigterm                 works briefly, dies of SIGTERM
 *   main-pthread-exit       main leaves with pthread_exit while a thread
 *                           works 0.3 s in work_beta and returns
 *   lone-pthread-exit       works 0.2 s in work_alpha, then the only
 *                           thread leaves with pthread_exit
 *   threads200              200 short-lived threads; prints the POSIX timers
 *                           and perf descriptors left once they are gone
 *   close-fds               works, closes every descriptor above 2, works
 *   fork                    forks children that work and exit()
 *   fork-late N [PAUSE_MS]  works 0.4 s, then forks N children one after
 *                           another, each working 0.15 s in work_gamma;
 *                           prints each child's pid; sleeps PAUSE_MS after
 *                           the first child
 *   fork-short              works 0.2 s, then forks a child that works
 *                           0.15 s in work_beta, sleeps 0.2 s and exits,
 *                           then one that works 0.15 s in work_gamma,
 *                           sleeps 0.2 s, then 1.8 s, and works 0.1 s in
 *                           work_gamma, then one that makes a thread that
 *                           sleeps 0.3 s; each child prints how many
 *                           contprof-agg threads it had after its first
 *                           sleep (and after its second)
 *   fork-hooks              forks a child, then 2.5 s later one that calls
 *                           signalfd (never called by the parent); prints
 *                           its pid
 *   prefork                 a pre-fork server: while a thread computes and
 *                           allocates under labels, forks 2 workers that
 *                           work and fork a child that works too
 *   exec-chain N            works 30 ms on two threads and execs itself
 *                           with N-1, down to 0
 *   exec-fail               works, fails to exec, works again
 *   exec-ignoring           handles SIGPROF itself (the profiler moves to
 *                           a real-time signal and guards SIGIO), ignores
 *                           SIGIO, works 1.5 s, fails an exec, prints
 *                           what it reads back for SIGIO, then execs
 *                           grep to print its SigIgn line
 *   spawn-ignoring          the same up to the exec, then posix_spawn and
 *                           posix_spawnp of grep printing the child's
 *                           SigIgn line, then 2 threads 20 such spawns
 *                           each at once, then what it reads for SIGIO
 *   spawn-preload           posix_spawn of itself with print-preload
 *                           (its initial environment), then the
 *                           shells of system() and popen() print theirs
 *   vfork-exec N            vfork + exec /bin/true N times while working
 *   print-preload           prints LD_PRELOAD as exec gave it
 *   own-sigprof             uses SIGPROF and ITIMER_PROF itself
 *   own-sigvtalrm           handles SIGVTALRM and sends it to itself
 *   deep                    works 300 frames deep
 *   dlopen LIB              dlopens LIB twice and works in it
 *   dlopen-quick LIB        dlopens LIB as it starts, works 60 ms in it,
 *                           closes it (before the profiler's first drain)
 *                           and works 300 ms in work_beta
 *   dlopen-profiler LIB     dlopens LIB (libcontprof.so), starts it from
 *                           the environment and churns malloc and free on
 *                           the main thread and on 8 threads started after
 *                           its first tick; prints how many of those
 *                           threads got libunwind's thread-local block
 * *   masked SECONDS [rt|rt-full|rt-full-handler|rt-full-ignore]
 *                           works 0.2 s in work_gamma, then SECONDS of
 *                           CPU: chunks of 100 ms in work_alpha with every
 *                           signal blocked (masked_chunk), each followed by
 *                           100 ms in work_beta; with rt, first installs a
 *                           SIGPROF handler of its own and works 1.5 s in
 *                           work_gamma (the profiler moves to a real-time
 *                           signal); rt-full also has a child keep a
 *                           signal pending and sets RLIMIT_SIGPENDING to 1
 *                           (the kernel can queue none of the profiler's
 *                           real-time signals: it sends SIGIO), and SIGIO
 *                           to its default (rt-full-handler: to a handler
 *                           of its own, counting; rt-full-ignore: to
 *                           SIG_IGN), printing what it read back; those
 *                           two raise SIGIO at the end and print how many
 *                           the handler got (app_sigio=N);
 *                           prints the true CPU ns of masked_chunk and
 *                           work_beta
 *   switchy SECONDS         two threads hand a token back and forth, each
 *                           working 50 us in work_alpha per turn (a server
 *                           thread that blocks at every request), while a
 *                           third works SECONDS of CPU in work_beta; prints
 *                           the true CPU ns of each, and the two threads'
 *                           whole CPU time
 *   phases LONG SHORT       one thread works LONG seconds of CPU in
 *                           work_alpha without blocking, then SHORT seconds
 *                           in work_beta in 2 ms bursts, each followed by a
 *                           0.3 ms sleep (a thread that starts blocking
 *                           often); prints the true CPU ns of each and how
 *                           often the thread was preempted a CPU-second
 *   random-blocks SECONDS MEAN_MS
 *                           one thread works SECONDS of CPU in work_alpha
 *                           in pieces of exponentially distributed length
 *                           (mean MEAN_MS ms of CPU), each followed by a
 *                           0.1 ms sleep: a thread that blocks at random,
 *                           1000 / MEAN_MS times a CPU-second; prints the
 *                           true CPU ns and how often the thread was
 *                           preempted a CPU-second
 *   preempted SECONDS       one thread works SECONDS of CPU in work_alpha
 *                           in pieces of 10 ms, each followed by a 0.1 ms
 *                           sleep (100 blocks a CPU-second: between the
 *                           limits of the clock's moves), on one CPU with
 *                           a thread that sleeps 20 us at a time and
 *                           preempts it at each wake (a server sharing its
 *                           CPU with its clients); prints the true CPU ns,
 *                           the worker's tid and its preemptions and blocks
 *                           per second of its CPU
 *   read-zero SECONDS       the only thread reads /dev/zero, 256 KiB a call,
 *                           from read_zero for SECONDS of its CPU (most of
 *                           it in the kernel, in the call)
 *   read-zero-threaded SECONDS  the same beside a second thread that
 *                           sleeps (so the hooks call the C library's read)
 *   handler-work SECONDS    sends itself SIGUSR1 4 times; its handler works
 *                           SECONDS / 4 of CPU each time in work_alpha
 */
#define _GNU_SOURCE /* dl_iterate_phdr */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "initial_env.h"

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile double sink;

/* Burns ns of this thread's CPU time; returns what it really burnt. */
static uint64_t burn(uint64_t ns) {
  uint64_t start = thread_cpu_ns(), now;
  double x = 1.0;
  while ((now = thread_cpu_ns()) - start < ns)
    for (int i = 0; i < 200; i++)
      x = sin(x) + 1.0;
  sink += x;
  return now - start;
}

__attribute__((noinline)) uint64_t work_alpha(uint64_t ns) { return burn(ns); }
__attribute__((noinline)) uint64_t work_beta(uint64_t ns) { return burn(ns); }
__attribute__((noinline)) uint64_t work_gamma(uint64_t ns) { return burn(ns); }

static _Atomic uint64_t truth[3];
static uint64_t seconds_ns;

/* Chunks of random length (0.2-1.0 ms) in a function drawn 50/30/20: the
 * work never beats in step with the sampling period or the kernel tick, so
 * each sample is an independent draw and the share's error is binomial. */
static void *shares_thread(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 7919u + (unsigned)time(NULL);
  uint64_t local[3] = {0, 0, 0}, start = thread_cpu_ns();
  while (thread_cpu_ns() - start < seconds_ns) {
    uint64_t ns = 200000 + (uint64_t)(rand_r(&seed) % 800000);
    int pick = rand_r(&seed) % 10;
    if (pick < 5)
      local[0] += work_alpha(ns);
    else if (pick < 8)
      local[1] += work_beta(ns);
    else
      local[2] += work_gamma(ns);
  }
  for (int i = 0; i < 3; i++)
    atomic_fetch_add(&truth[i], local[i]);
  return NULL;
}

static int shares(int threads, double seconds) {
  seconds_ns = (uint64_t)(seconds * 1e9);
  pthread_t t[64];
  for (int i = 0; i < threads; i++)
    pthread_create(&t[i], NULL, shares_thread, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  printf(
      "work_alpha=%" PRIu64 " work_beta=%" PRIu64 " work_gamma=%" PRIu64 "\n",
      atomic_load(&truth[0]), atomic_load(&truth[1]), atomic_load(&truth[2]));
  return 0;
}

static void *short_thread(void *arg) {
  (void)arg;
  work_alpha(10000000);
  return NULL;
}

static int count_timers(void) {
  FILE *f = fopen("/proc/self/timers", "r");
  if (!f)
    return -1;
  int n = 0;
  char line[256];
  while (fgets(line, sizeof line, f))
    n += strncmp(line, "ID:", 3) == 0;
  fclose(f);
  return n;
}

/* Open perf event descriptors (the profiler's task clocks); the lowest
 * number among them in *lowest (-1: none). */
static int count_perf_fds_lowest(int *lowest) {
  *lowest = -1;
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char path[300], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len > 0) {
      target[len] = 0;
      if (strcmp(target, "anon_inode:[perf_event]") == 0) {
        n++;
        int fd = atoi(e->d_name);
        if (*lowest < 0 || fd < *lowest)
          *lowest = fd;
      }
    }
  }
  closedir(d);
  return n;
}

static int count_perf_fds(void) {
  int lowest;
  return count_perf_fds_lowest(&lowest);
}

/* close-fds: works, closes every descriptor above 2 as a daemon does (the
 * profiler's perf task clocks among them), works again. */
static int close_fds(void) {
  work_alpha(300000000);
  int fds[1024], n = 0;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL && n < 1024) {
    int fd = atoi(e->d_name);
    if (fd > 2 && fd != dirfd(d))
      fds[n++] = fd;
  }
  if (d)
    closedir(d);
  for (int i = 0; i < n; i++)
    close(fds[i]);
  work_beta(2000000000);
  printf("closed=%d\n", n);
  return 0;
}

/* switchy: pipe[i] wakes thread i of the pair. */
static int token_pipe[2][2];
static _Atomic int token_stop;
static _Atomic uint64_t token_truth, token_cpu, steady_truth;

static void *token_thread(void *arg) {
  int me = (int)(uintptr_t)arg;
  uint64_t local = 0;
  char c = 't';
  for (;;) {
    if (me == 1 || local) { /* thread 0 starts with the token */
      if (read(token_pipe[me][0], &c, 1) != 1 || c == 'q')
        break;
    }
    local += work_alpha(50000);
    c = atomic_load(&token_stop) ? 'q' : 't';
    if (write(token_pipe[1 - me][1], &c, 1) != 1 || c == 'q')
      break;
  }
  atomic_fetch_add(&token_truth, local);
  atomic_fetch_add(&token_cpu, thread_cpu_ns()); /* its whole life */
  return NULL;
}

static void *steady_thread(void *arg) {
  atomic_fetch_add(&steady_truth, work_beta((uint64_t)(uintptr_t)arg));
  return NULL;
}

/* The calling thread's preemptions so far per second of its CPU time: a
 * test that expects a thread to keep its clock, or to move for one reason,
 * knows when the machine preempted it often enough to move it for that
 * instead (docs/signals.md, "Which clock"). */
static double per_cpu_s(long count) {
  double cpu_s = (double)thread_cpu_ns() / 1e9;
  return cpu_s > 0 ? (double)count / cpu_s : 0;
}

static double preempted_per_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return per_cpu_s(ru.ru_nivcsw);
}

/* phases: long bursts, then short ones. */
static uint64_t phase_truth[2];
static double phase_seconds[2], phase_preempted;

static void *phases_thread(void *arg) {
  (void)arg;
  phase_truth[0] = work_alpha((uint64_t)(phase_seconds[0] * 1e9));
  uint64_t start = thread_cpu_ns();
  while (thread_cpu_ns() - start < (uint64_t)(phase_seconds[1] * 1e9)) {
    phase_truth[1] += work_beta(2000000);
    struct timespec nap = {0, 300000};
    nanosleep(&nap, NULL);
  }
  phase_preempted = preempted_per_cpu_s();
  return NULL;
}

static int phases(double long_s, double short_s) {
  phase_seconds[0] = long_s;
  phase_seconds[1] = short_s;
  pthread_t t;
  pthread_create(&t, NULL, phases_thread, NULL);
  pthread_join(t, NULL);
  printf("work_alpha=%" PRIu64 " work_beta=%" PRIu64
         " preempted_per_cpu_s=%.0f\n",
         phase_truth[0], phase_truth[1], phase_preempted);
  return 0;
}

/* random-blocks: the pieces' lengths (xorshift64, seeded from the clock:
 * a fixed seed fixes where the long pieces are). */
typedef struct {
  double seconds, mean_ms;
  uint64_t truth; /* work_alpha's true CPU ns */
  double preempted;
} random_blocks_args;

static void *random_blocks_thread(void *arg) {
  random_blocks_args *a = arg;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t x = ((uint64_t)now.tv_nsec << 20 ^ (uint64_t)getpid()) | 1;
  uint64_t start = thread_cpu_ns();
  while (thread_cpu_ns() - start < (uint64_t)(a->seconds * 1e9)) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    double u = (double)(x >> 11) / 9007199254740992.0; /* [0, 1) */
    a->truth += work_alpha((uint64_t)(-log(1.0 - u) * a->mean_ms * 1e6));
    struct timespec nap = {0, 100000};
    nanosleep(&nap, NULL);
  }
  a->preempted = preempted_per_cpu_s();
  return NULL;
}

static int random_blocks(double seconds, double mean_ms) {
  random_blocks_args a = {seconds, mean_ms, 0, 0};
  pthread_t t;
  pthread_create(&t, NULL, random_blocks_thread, &a);
  pthread_join(t, NULL);
  printf("work_alpha=%" PRIu64 " preempted_per_cpu_s=%.0f\n", a.truth,
         a.preempted);
  return 0;
}

/* read-zero: a thread of one process whose time is in read(). */
__attribute__((noinline)) static void read_zero(int fd, double seconds) {
  static char buf[256 * 1024];
  uint64_t cpu0 = thread_cpu_ns();
  while (thread_cpu_ns() - cpu0 < (uint64_t)(seconds * 1e9))
    if (read(fd, buf, sizeof buf) <= 0) /* short when a signal came */
      exit(2);
}

static int read_zero_main(double seconds) {
  int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 2;
  read_zero(fd, seconds);
  close(fd);
  return 0;
}

static void *sleep_until_exit(void *unused) {
  (void)unused;
  for (;;)
    pause();
  return NULL;
}

static int read_zero_threaded(double seconds) {
  pthread_t t;
  if (pthread_create(&t, NULL, sleep_until_exit, NULL) != 0)
    return 2;
  return read_zero_main(seconds);
}

/* handler-work: CPU time in an application's signal handler. */
static uint64_t handler_work_ns;

static void work_in_handler(int sig) {
  (void)sig;
  work_alpha(handler_work_ns);
}

static int handler_work(double seconds) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = work_in_handler;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  handler_work_ns = (uint64_t)(seconds / 4 * 1e9);
  for (int i = 0; i < 4; i++)
    raise(SIGUSR1);
  return 0;
}

/* preempted: the worker and the waker on one CPU. */
static cpu_set_t preempt_cpu;
static _Atomic int preempt_stop;

static void *preempting_thread(void *arg) {
  (void)arg;
  sched_setaffinity(0, sizeof preempt_cpu, &preempt_cpu);
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* wake every 20-30 us */
  while (!atomic_load(&preempt_stop)) {
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
  return NULL;
}

static void *preempted_thread(void *arg) {
  double *seconds = arg;
  sched_setaffinity(0, sizeof preempt_cpu, &preempt_cpu);
  uint64_t cpu0 = thread_cpu_ns(), truth = 0;
  while (thread_cpu_ns() - cpu0 < (uint64_t)(*seconds * 1e9)) {
    truth += work_alpha(10000000);
    struct timespec nap = {0, 100000};
    nanosleep(&nap, NULL);
  }
  struct rusage ru; /* over the thread's life, which is this */
  getrusage(RUSAGE_THREAD, &ru);
  printf("work_alpha=%" PRIu64 " tid=%d preempted_per_cpu_s=%.0f "
         "blocked_per_cpu_s=%.0f\n",
         truth, (int)syscall(SYS_gettid), per_cpu_s(ru.ru_nivcsw),
         per_cpu_s(ru.ru_nvcsw));
  return NULL;
}

static int preempted(double seconds) {
  CPU_ZERO(&preempt_cpu);
  CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &preempt_cpu);
  pthread_t waker, worker;
  pthread_create(&waker, NULL, preempting_thread, NULL);
  pthread_create(&worker, NULL, preempted_thread, &seconds);
  pthread_join(worker, NULL);
  atomic_store(&preempt_stop, 1);
  pthread_join(waker, NULL);
  return 0;
}

static int switchy(double seconds) {
  pthread_t t[3];
  for (int i = 0; i < 2; i++)
    if (pipe(token_pipe[i]) != 0)
      return 1;
  pthread_create(&t[2], NULL, steady_thread,
                 (void *)(uintptr_t)(seconds * 1e9));
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, token_thread, (void *)(uintptr_t)i);
  pthread_join(t[2], NULL);
  atomic_store(&token_stop, 1);
  pthread_join(t[0], NULL);
  pthread_join(t[1], NULL);
  printf("work_alpha=%" PRIu64 " work_beta=%" PRIu64 " token_cpu=%" PRIu64 "\n",
         atomic_load(&token_truth), atomic_load(&steady_truth),
         atomic_load(&token_cpu));
  return 0;
}

static int threads200(void) {
  for (int batch = 0; batch < 10; batch++) {
    pthread_t t[20];
    for (int i = 0; i < 20; i++)
      if (pthread_create(&t[i], NULL, short_thread, NULL) != 0)
        return 1;
    for (int i = 0; i < 20; i++)
      pthread_join(t[i], NULL);
  }
  int lowest;
  int perf_fds = count_perf_fds_lowest(&lowest);
  struct rlimit nofile;
  getrlimit(RLIMIT_NOFILE, &nofile);
  printf("timers=%d perf_fds=%d lowest_perf_fd=%d nofile=%llu\n",
         count_timers(), perf_fds, lowest,
         nofile.rlim_cur == RLIM_INFINITY
             ? 1ull << 20
             : (unsigned long long)nofile.rlim_cur);
  return 0;
}

/* Forks children (one from a second thread) that work and exit(): they must
 * not hang or crash at exit, and the parent's exit status is its own. */
static void *fork_from_thread(void *arg) {
  (void)arg;
  pid_t pid = fork();
  if (pid == 0) {
    work_beta(100000000);
    /* The parent's perf descriptors (two threads) are not the child's. */
    printf("thread_child_perf_fds=%d\n", count_perf_fds());
    fflush(stdout);
    exit(5);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return (void *)(intptr_t)(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static int forking(void) {
  work_alpha(200000000);
  pid_t pid = fork();
  if (pid == 0) {
    work_gamma(100000000);
    exit(4);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  pthread_t t;
  void *from_thread;
  pthread_create(&t, NULL, fork_from_thread, NULL);
  pthread_join(t, &from_thread);
  printf("child=%d thread_child=%d\n",
         WIFEXITED(status) ? WEXITSTATUS(status) : -1,
         (int)(intptr_t)from_thread);
  work_alpha(200000000);
  return 0;
}

/* Milliseconds since *t (CLOCK_MONOTONIC). */
static long ms_since(const struct timespec *t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long)(now.tv_sec - t->tv_sec) * 1000 +
         (now.tv_nsec - t->tv_nsec) / 1000000;
}

/* Sleeps ms whatever signals come meanwhile. */
__attribute__((noinline)) static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* fork-hooks: a child that calls a hooked function (signalfd) its parent
 * never called, forked 2.5 s after a first child (the parent's profiler has
 * had its tick since it forked). */
static int fork_hooks(void) {
  work_alpha(100000000);
  pid_t first = fork();
  if (first == 0)
    _exit(0);
  waitpid(first, NULL, 0);
  sleep_ms(2500);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR2);
    int fd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (fd >= 0)
      close(fd);
    _exit(fd >= 0 ? 0 : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  printf("hook_child_pid=%d ok=%d\n", (int)pid,
         WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return 0;
}

/* fork-late: children forked once the parent's symbol tables are read
 * (its drains symbolize every 100 ms). */
static int fork_late(int n, int pause_ms) {
  work_alpha(400000000);
  int ok = 0;
  for (int i = 0; i < n; i++) {
    if (i == 1 && pause_ms > 0)
      sleep_ms(pause_ms);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      work_gamma(150000000);
      exit(0);
    }
    int status = -1;
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
        WEXITSTATUS(status) == 0)
      ok++;
    printf("child_pid=%d\n", (int)pid);
    work_alpha(50000000);
  }
  printf("children_ok=%d\n", ok);
  return 0;
}

/* This process's threads named name (/proc/self/task/TID/comm). */
static int threads_named(const char *name) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char path[300], comm[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f && fgets(comm, sizeof comm, f)) {
      comm[strcspn(comm, "\n")] = 0;
      n += strcmp(comm, name) == 0;
    }
    if (f)
      fclose(f);
  }
  if (d)
    closedir(d);
  return n;
}

static void *main_exit_worker(void *arg) {
  (void)arg;
  work_beta(300000000);
  return NULL;
}

static void *nap(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "napper");
  sleep_ms(300);
  return NULL;
}

/* fork-short: a child that lives a moment, one that lives on, and one that
 * makes a thread. */
static int fork_short(void) {
  work_alpha(200000000);
  int ok = 0;
  for (int i = 0; i < 3; i++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      struct timespec born;
      clock_gettime(CLOCK_MONOTONIC, &born);
      if (i == 0) {
        work_beta(150000000);
        sleep_ms(200);
        int agg = threads_named("contprof-agg");
        printf("short_pid=%d short_agg=%d short_at_ms=%ld ", (int)getpid(), agg,
               ms_since(&born));
      } else if (i == 2) {
        pthread_t t;
        int made = pthread_create(&t, NULL, nap, NULL) == 0;
        sleep_ms(100);
        printf("threaded_pid=%d threaded_agg=%d ", (int)getpid(),
               threads_named("contprof-agg"));
        if (made)
          pthread_join(t, NULL);
      } else {
        work_gamma(150000000);
        sleep_ms(200);
        int early = threads_named("contprof-agg");
        long early_ms = ms_since(&born);
        sleep_ms(1800);
        int late = threads_named("contprof-agg");
        work_gamma(100000000);
        printf("long_pid=%d long_agg_early=%d long_early_ms=%ld "
               "long_agg_late=%d ",
               (int)getpid(), early, early_ms, late);
      }
      printf("life_ms=%ld\n", ms_since(&born));
      exit(0);
    }
    int status = -1;
    if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
        WEXITSTATUS(status) == 0)
      ok++;
  }
  printf("children_ok=%d\n", ok);
  return 0;
}

/* prefork: the parent's thread keeps computing in work_alpha, allocating and
 * pushing labels (so the profiler's locks are busy at fork time); each
 * worker computes in work_beta and forks a child that computes in
 * work_gamma. Every process ends with exit(), which writes its last
 * profile. */
static _Atomic int parent_stop;
/* The program is not linked with contprof: under LD_PRELOAD these resolve to
 * the preloaded library's label calls, else stay NULL. */
typedef struct label_scope {
  uint32_t previous, valid;
} label_scope;
extern int contprof_label_push(const char *key, const char *value,
                               label_scope *scope) __attribute__((weak));
extern void contprof_label_pop(label_scope *scope) __attribute__((weak));

static void *parent_busy(void *arg) {
  (void)arg;
  while (!atomic_load(&parent_stop)) {
    label_scope scope;
    int pushed = contprof_label_push != NULL &&
                 contprof_label_push("role", "parent", &scope) == 0;
    free(malloc(1000));
    work_alpha(1000000);
    if (pushed)
      contprof_label_pop(&scope);
  }
  return NULL;
}

static int wait_status(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid)
    return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int preforking(void) {
  pthread_t busy;
  pthread_create(&busy, NULL, parent_busy, NULL);
  work_alpha(100000000);
  pid_t workers[2];
  for (int i = 0; i < 2; i++) {
    workers[i] = fork();
    if (workers[i] == 0) {
      work_beta(150000000);
      pid_t child = fork();
      if (child == 0) {
        work_gamma(150000000);
        exit(0);
      }
      exit(wait_status(child) == 0 ? 0 : 9);
    }
  }
  int ok = 0;
  for (int i = 0; i < 2; i++)
    ok += wait_status(workers[i]) == 0;
  atomic_store(&parent_stop, 1);
  pthread_join(busy, NULL);
  printf("workers_ok=%d\n", ok);
  return ok == 2 ? 0 : 1;
}

/* exec-chain: every image is busy on two threads when it execs (signals
 * flying at a high rate); a sampling signal pending at exec would kill the
 * next image before main. */
static void *exec_helper(void *arg) {
  (void)arg;
  for (;;)
    work_beta(1000000);
  return NULL;
}

static int exec_chain(int n) {
  pthread_t t;
  pthread_create(&t, NULL, exec_helper, NULL);
  work_alpha(30000000);
  if (n <= 0) {
    printf("chain done\n");
    return 0;
  }
  char next[16];
  snprintf(next, sizeof next, "%d", n - 1);
  execl("/proc/self/exe", "workload", "exec-chain", next, (char *)NULL);
  perror("execl");
  return 1;
}

static int exec_fail(void) {
  work_alpha(200000000);
  char *argv[] = {"nowhere", NULL};
  int rc = execv("/nonexistent/contprof-test", argv);
  int err = errno;
  work_beta(200000000);
  printf("exec=%d errno=%s\n", rc, err == ENOENT ? "ENOENT" : "other");
  return 0;
}

static void install_own_handler(int sig);

/* What the kernel has for SIGIO: whether it is caught (by the profiler's
 * guard) and whether the application reads it back as ignored. */
static void print_sigio(const char *when) {
  struct sigaction now;
  sigaction(SIGIO, NULL, &now);
  unsigned long long caught = 0;
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "SigCgt: %llx", &caught) == 1)
      break;
  if (f)
    fclose(f);
  printf("%s=%s sigio_caught=%d\n", when,
         now.sa_handler == SIG_IGN ? "ignored" : "other",
         !!(caught & (1ull << (SIGIO - 1))));
  fflush(stdout);
}

static int exec_ignoring(void) {
  install_own_handler(SIGPROF);
  signal(SIGIO, SIG_IGN);
  work_gamma(1500000000);
  char *none[] = {"nowhere", NULL};
  execv("/nonexistent/contprof-test", none);
  print_sigio("after_failed_exec");
  work_gamma(100000000);
  char *argv[] = {"grep", "^SigIgn", "/proc/self/status", NULL};
  execv("/bin/grep", argv);
  perror("execv grep");
  return 1;
}

#define SPAWNING_THREADS 2
#define SPAWNS_PER_THREAD 20

/* SPAWNS_PER_THREAD posix_spawn calls of grep printing its SigIgn line,
 * each waited for; arg: the argv. */
static void *spawn_thread(void *arg) {
  extern char **environ;
  for (int i = 0; i < SPAWNS_PER_THREAD; i++) {
    pid_t pid;
    int status;
    if (posix_spawn(&pid, "/bin/grep", NULL, NULL, arg, environ) == 0)
      waitpid(pid, &status, 0);
  }
  return NULL;
}

/* As exec_ignoring, with posix_spawn and posix_spawnp: each child greps
 * its own SigIgn line; then SPAWNING_THREADS threads spawn at once; then
 * what the parent has for SIGIO. */
static int spawn_ignoring(void) {
  install_own_handler(SIGPROF);
  signal(SIGIO, SIG_IGN);
  work_gamma(1500000000); /* the profiler moves at its first tick */
  char *argv[] = {"grep", "^SigIgn", "/proc/self/status", NULL};
  extern char **environ;
  pid_t pid;
  int status;
  for (int p = 0; p < 2; p++) {
    int rc = p ? posix_spawnp(&pid, "grep", NULL, NULL, argv, environ)
               : posix_spawn(&pid, "/bin/grep", NULL, NULL, argv, environ);
    if (rc != 0 || waitpid(pid, &status, 0) != pid) {
      printf("spawn failed: %s\n", strerror(rc));
      return 1;
    }
  }
  pthread_t t[SPAWNING_THREADS];
  for (int i = 0; i < SPAWNING_THREADS; i++)
    pthread_create(&t[i], NULL, spawn_thread, argv);
  for (int i = 0; i < SPAWNING_THREADS; i++)
    pthread_join(t[i], NULL);
  print_sigio("after_spawn");
  work_gamma(100000000);
  return 0;
}

/* posix_spawn of this program printing its LD_PRELOAD, given the
 * environment this process started with (its LD_PRELOAD as it came: the
 * spawn hook must edit it); then the shells of system() and popen()
 * printing theirs, which come from the process's environment as it is
 * now. */
static int spawn_preload(const char *self) {
  char *argv[] = {(char *)self, "print-preload", NULL};
  pid_t pid;
  int status;
  int rc = posix_spawn(&pid, self, NULL, NULL, argv, initial_environment());
  if (rc != 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    return 1;
  /* The shell that system() and popen() start prints what it got, as
   * the kernel keeps it (its own start would have edited $LD_PRELOAD; a
   * program it ran would get its exec hook's environment). */
  const char *command =
      "printf 'LD_PRELOAD=[%s]\\n' \"$(tr '\\0' '\\n' </proc/$$/environ | "
      "sed -n 's/^LD_PRELOAD=//p')\"";
  fflush(stdout);
  status = system(command);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return 1;
  FILE *child = popen(command, "r");
  if (!child)
    return 1;
  char line[4096];
  while (fgets(line, sizeof line, child))
    printf("popen: %s", line);
  return pclose(child) == 0 ? 0 : 1;
}

static void exit_in_handler(int sig) {
  (void)sig;
  _exit(sig == SIGSEGV ? 8 : 6);
}

static sigjmp_buf handler_exit_env;

static void leave_with_longjmp(int sig) {
  (void)sig;
  siglongjmp(handler_exit_env, 1);
}

/* A handler left with siglongjmp: main was spinning in its own frame when
 * SIGALRM came (the frame the jump returns to), then works and _exits: the
 * last profile is written, the handler being over. */
static int longjmp_exit(void) {
  struct sigaction sa = {.sa_handler = leave_with_longjmp};
  sigaction(SIGALRM, &sa, NULL);
  if (sigsetjmp(handler_exit_env, 1) == 0) {
    struct itimerval it = {.it_value = {.tv_usec = 20000}};
    setitimer(ITIMER_REAL, &it, NULL);
    for (volatile unsigned long spin = 0;; spin++)
      ;
  }
  work_alpha(300000000);
  _exit(9);
}

/* depth frames of 4 KiB each, then SIGUSR1 at the bottom. */
static __attribute__((noinline)) int raise_deep(int depth) {
  volatile char pad[4096];
  pad[0] = (char)depth;
  if (depth == 0)
    raise(SIGUSR1);
  else
    raise_deep(depth - 1);
  return pad[0];
}

/* The first handler, 32 KiB down the stack, is left with siglongjmp; the
 * second, entered higher up, calls _exit: it is in a handler, and the
 * process ends at once. */
static int longjmp_handler_exit(void) {
  struct sigaction sa = {.sa_handler = leave_with_longjmp};
  sigaction(SIGUSR1, &sa, NULL);
  struct sigaction term = {.sa_handler = exit_in_handler};
  sigaction(SIGTERM, &term, NULL);
  work_alpha(100000000);
  if (sigsetjmp(handler_exit_env, 1) == 0)
    raise_deep(8);
  raise(SIGTERM);
  return 1;
}

/* The child ends at once: it never returns from here. */
static __attribute__((noinline)) pid_t vfork_and_exit(void) {
  pid_t pid = vfork();
  if (pid == 0)
    _exit(0);
  return pid;
}

static int vfork_underscore_exit(int n) {
  int ok = 0;
  for (int i = 0; i < n; i++) {
    pid_t pid = vfork_and_exit();
    ok += wait_status(pid) == 0;
    work_alpha(2000000);
  }
  printf("vfork_ok=%d\n", ok);
  return ok == n ? 0 : 1;
}

static int vfork_exec(int n) {
  pthread_t t;
  pthread_create(&t, NULL, exec_helper, NULL);
  int ok = 0;
  /* The first vfork comes before any work: the main thread has most likely
   * not been sampled yet (nothing of the profiler's is cached for it). */
  for (int i = 0; i < n; i++) {
    pid_t pid = vfork();
    if (pid == 0) {
      char *argv[] = {"true", NULL};
      execv("/bin/true", argv);
      _exit(127);
    }
    ok += wait_status(pid) == 0;
    work_alpha(2000000);
  }
  printf("vfork_ok=%d\n", ok);
  return ok == n ? 0 : 1;
}

/* The application uses SIGPROF with setitimer itself: its handler must keep
 * receiving its signals while the profiler samples with another one, and
 * none of the profiler's. ITIMER_PROF's signals come with SI_KERNEL, those
 * it sends itself with kill with SI_USER; any other code is not the
 * application's. Then it sends SIGPROF to its own thread while one is
 * pending there: none may be lost, which needs the profiler to have moved
 * its sampling to a signal of its own (docs/signals.md, "Sharing a
 * signal"). */
static volatile sig_atomic_t timer_ticks, raised_ticks, tkill_ticks,
    foreign_ticks;
static void own_handler(int sig, siginfo_t *info, void *ctx) {
  (void)sig, (void)ctx;
  if (info->si_code == SI_KERNEL)
    timer_ticks++;
  else if (info->si_code == SI_USER && info->si_pid == getpid())
    raised_ticks++;
  else if (info->si_code == SI_TKILL && info->si_pid == getpid())
    tkill_ticks++;
  else
    foreign_ticks++;
}

/* sig sent to this thread while one is pending on it (sig blocked
 * meanwhile): a sampling signal of the profiler's still on sig would be
 * pending already after up to 30 ms of CPU, and this one would merge with
 * it and be lost. Returns how many of `n` sent reached the handler. */
static int raise_while_pending(int sig, int n) {
  sigset_t prof, pending;
  sigemptyset(&prof);
  sigaddset(&prof, sig);
  int before = tkill_ticks;
  for (int i = 0; i < n; i++) {
    pthread_sigmask(SIG_BLOCK, &prof, NULL);
    uint64_t start = thread_cpu_ns();
    do {
      work_beta(1000000);
      sigpending(&pending);
    } while (!sigismember(&pending, sig) && thread_cpu_ns() - start < 30000000);
    raise(sig);
    pthread_sigmask(SIG_UNBLOCK, &prof, NULL);
  }
  return tkill_ticks - before;
}

static uint64_t process_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* 40 chunks of 25 ms of CPU, sending itself SIGPROF after each, under its own
 * 25 ms ITIMER_PROF. Prints what its handler received, how many timer ticks the
 * process's CPU time allows (the kernel checks the timer at its tick, one
 * expiry a check: a VM under load delivers far fewer, down to none without any
 * profiler here), and whether its timer was left as it set it. */
static void install_own_handler(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = own_handler;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(sig, &sa, NULL);
}

static int own_sigprof(void) {
  install_own_handler(SIGPROF);
  struct itimerval itv = {{0, 25000}, {0, 25000}};
  uint64_t cpu0 = process_cpu_ns();
  setitimer(ITIMER_PROF, &itv, NULL);
  for (int i = 0; i < 40; i++) {
    work_alpha(25000000);
    kill(getpid(), SIGPROF);
  }
  struct itimerval now;
  getitimer(ITIMER_PROF, &now);
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_PROF, &off, NULL);
  uint64_t cpu = process_cpu_ns() - cpu0;
  /* The profiler moves off SIGPROF within a second of seeing our handler. */
  struct timespec second = {1, 500000000};
  nanosleep(&second, NULL);
  int tkilled = raise_while_pending(SIGPROF, 20);
  printf("timer_ticks=%d raised_ticks=%d foreign_ticks=%d allowed=%d "
         "timer_kept=%d tkill_received=%d of 20\n",
         (int)timer_ticks, (int)raised_ticks, (int)foreign_ticks,
         (int)(cpu / 25000000ull),
         now.it_interval.tv_sec == 0 && now.it_interval.tv_usec == 25000,
         tkilled);
  return 0;
}

/* The same for the wall sampler's SIGVTALRM: the application's handler,
 * then 20 SIGVTALRM to its own thread while one is pending there. */
static int own_sigvtalrm(void) {
  install_own_handler(SIGVTALRM);
  struct timespec wait = {0, 200000000};
  nanosleep(&wait, NULL);
  int tkilled = raise_while_pending(SIGVTALRM, 20);
  printf("tkill_received=%d of 20 foreign_ticks=%d\n", tkilled,
         (int)foreign_ticks);
  return 0;
}

/* ns of CPU with every signal blocked, as in an application's critical
 * section: the profiler's clock keeps running, and its signals wait. */
__attribute__((noinline)) static uint64_t masked_chunk(uint64_t ns) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  uint64_t used = work_alpha(ns);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return used;
}

/* Forks a child that keeps a SIGUSR1 pending, counted against the user's
 * RLIMIT_SIGPENDING (all the user's processes share it), until *release is
 * closed or we exit. Returns its pid, or -1. */
static pid_t hold_a_pending_signal(int *release) {
  int ready[2], hold[2];
  if (pipe(ready) != 0 || pipe(hold) != 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    close(hold[1]);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    kill(getpid(), SIGUSR1);
    /* A helper: it ends with the system call, without the last profile
     * that _exit's hook would write (the test reads the parent's alone). */
    char c = 1;
    if (write(ready[1], &c, 1) != 1)
      syscall(SYS_exit_group, 1);
    while (read(hold[0], &c, 1) < 0 && errno == EINTR)
      ;
    syscall(SYS_exit_group, 0);
  }
  close(ready[1]);
  close(hold[0]);
  char c;
  if (pid < 0 || read(ready[0], &c, 1) != 1) {
    close(ready[0]);
    close(hold[1]);
    return -1;
  }
  close(ready[0]);
  *release = hold[1];
  return pid;
}

static volatile sig_atomic_t app_sigio;
static void count_sigio(int sig) {
  (void)sig;
  app_sigio++;
}

/* sigio: 0 the default, 1 a handler of its own, 2 SIG_IGN. */
static int masked(double seconds, int rt, int full, int sigio) {
  if (rt)
    install_own_handler(SIGPROF);
  int release = -1;
  pid_t holder = -1;
  if (full) {
    /* The user's queue full whatever the machine's other processes do:
     * every real-time signal of the profiler is refused. */
    holder = hold_a_pending_signal(&release);
    if (holder < 0)
      perror("holding a pending signal");
    struct rlimit one = {1, 1};
    if (setrlimit(RLIMIT_SIGPENDING, &one) != 0)
      perror("setrlimit RLIMIT_SIGPENDING");
    struct sigaction want, old;
    memset(&want, 0, sizeof want);
    want.sa_handler = sigio == 1 ? count_sigio : sigio == 2 ? SIG_IGN : SIG_DFL;
    want.sa_flags = SA_RESTART;
    sigaction(SIGIO, &want, NULL);
    sigaction(SIGIO, NULL, &old);
    printf("sigio_read_back=%s ",
           !(old.sa_flags & SA_SIGINFO) && old.sa_handler == want.sa_handler
               ? "as_set"
               : "other");
  }
  /* Sampled before the first blocked stretch: a thread's first sample
   * weighs at most one period (the CPU it used before is not the
   * profile's). */
  work_gamma(rt ? 1500000000 : 200000000);
  uint64_t in_masked = 0, in_beta = 0, start = thread_cpu_ns();
  while (thread_cpu_ns() - start < (uint64_t)(seconds * 1e9)) {
    in_masked += masked_chunk(100000000);
    in_beta += work_beta(100000000);
  }
  if (sigio) {
    int before = app_sigio;
    raise(SIGIO); /* its own: reaches its handler, or is ignored */
    printf("app_sigio=%d own_reached=%d ", (int)app_sigio,
           (int)app_sigio > before);
  }
  printf("masked_chunk=%" PRIu64 " work_beta=%" PRIu64 "\n", in_masked,
         in_beta);
  if (holder > 0) {
    close(release);
    waitpid(holder, NULL, 0);
  }
  return 0;
}

/* Recurses `depth` frames, then works: a stack deeper than
 * CONTPROF_MAX_FRAMES. */
__attribute__((noinline)) static uint64_t deep(int depth) {
  if (depth <= 0)
    return work_alpha(500000000);
  uint64_t r = deep(depth - 1);
  __asm__ volatile("" ::: "memory");
  return r;
}

/* dlopens path, works in_ns in its plugin_work, closes it and works
 * after_ns in work_beta. Returns 0, or 1 if it cannot. */
static int plugin_round(const char *path, uint64_t in_ns, uint64_t after_ns) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return 1;
  }
  void (*work)(uint64_t) = (void (*)(uint64_t))dlsym(h, "plugin_work");
  if (!work)
    return 1;
  work(in_ns);
  dlclose(h);
  work_beta(after_ns);
  return 0;
}

/* dlopens a library while profiled, works in it, closes it, and does it
 * again: its code is symbolized each time. */
static int dlopen_work(const char *path) {
  for (int round = 0; round < 2; round++)
    if (plugin_round(path, 300000000, 50000000))
      return 1;
  return 0;
}

/* A plugin used for a moment as the program starts, closed before the
 * profiler's first drain (100 ms after its start): its samples keep its
 * symbols only if the mappings were read before the close. */
static int dlopen_quick(const char *path) {
  return plugin_round(path, 60000000, 300000000);
}

/* Allocates and frees blocks too large for malloc's per-thread cache for
 * ns of this thread's CPU time: most of it holds the arena's lock. The
 * small size class stays empty, so an allocation made by a handler there
 * would have to take that lock too. */
__attribute__((noinline)) static void malloc_churn(uint64_t ns) {
  void *held[16] = {0};
  uint64_t start = thread_cpu_ns();
  for (unsigned i = 0; thread_cpu_ns() - start < ns; i++) {
    for (unsigned k = 0; k < 64; k++, i++) {
      unsigned slot = (i * 7u) % 16u;
      free(held[slot]);
      held[slot] = malloc(2048 + (i * 4099u) % 30000u);
      if (held[slot])
        ((volatile char *)held[slot])[0] = (char)i;
    }
  }
  for (unsigned k = 0; k < 16; k++)
    free(held[k]);
}

struct tls_find {
  uintptr_t addr;
  int allocated;
};

static int tls_find_object(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct tls_find *f = arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    uintptr_t lo = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
    if (info->dlpi_phdr[i].p_type == PT_LOAD &&
        f->addr - lo < info->dlpi_phdr[i].p_memsz) {
      f->allocated = info->dlpi_tls_data != NULL;
      return 1;
    }
  }
  return 0;
}

static uintptr_t unw_backtrace_addr;
static atomic_int tls_allocated;

/* 1.2 s of churn, then whether this thread's block of libunwind's
 * thread-local data exists: only unw_backtrace makes it, and this thread
 * never called it. */
static void *churn_thread(void *arg) {
  (void)arg;
  malloc_churn(1200000000ull);
  struct tls_find f = {unw_backtrace_addr, 0};
  dl_iterate_phdr(tls_find_object, &f);
  if (f.allocated)
    atomic_fetch_add(&tls_allocated, 1);
  return NULL;
}

/* The profiler loaded by dlopen, as the Python and Ruby extensions load it:
 * then libunwind's thread-local data is allocated on demand, with malloc. */
static int dlopen_profiler(const char *lib) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
    return 1;
  }
  int (*start)(const void *) =
      (int (*)(const void *))dlsym(h, "contprof_start");
  int (*stop)(void) = (int (*)(void))dlsym(h, "contprof_stop");
  unw_backtrace_addr = (uintptr_t)dlsym(h, "unw_backtrace");
  if (!start || !stop || !unw_backtrace_addr || start(NULL) != 0)
    return 1;
  malloc_churn(1500000000ull); /* past the profiler's first tick */
  int threads = 0;
  for (int batch = 0; batch < 2; batch++) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
      threads += pthread_create(&t[i], NULL, churn_thread, NULL) == 0;
    for (int i = 0; i < 4; i++)
      pthread_join(t[i], NULL);
  }
  if (stop() != 0)
    return 1;
  printf("dlopen-profiler threads=%d tls_allocated=%d\n", threads,
         atomic_load(&tls_allocated));
  return 0;
}

/* fork-loader N: a thread lists the loaded objects over and over with a
 * slow callback (dl_iterate_phdr holds the loader's lock all the while, as
 * the profiler's own threads did while building their tables), while main
 * forks N children that each list the objects once and exit. A child that
 * inherited the lock held would wait for it forever: one that has not
 * exited after 5 s is killed and counted. Prints "forks=N hung=K". */
static atomic_int loader_stop;
static int slow_object(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)info, (void)size, (void)arg;
  struct timespec t = {0, 100000}; /* 100 us per object */
  nanosleep(&t, NULL);
  return 0;
}
static int count_object(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)info, (void)size;
  ++*(int *)arg;
  return 0;
}
static void *list_objects(void *arg) {
  (void)arg;
  while (!atomic_load(&loader_stop))
    dl_iterate_phdr(slow_object, NULL);
  return NULL;
}
static int fork_loader(int n) {
  pthread_t t;
  pthread_create(&t, NULL, list_objects, NULL);
  int hung = 0;
  for (int i = 0; i < n; i++) {
    struct timespec gap = {0, 1000000};
    nanosleep(&gap, NULL);
    pid_t pid = fork();
    if (pid == 0) {
      int objects = 0;
      dl_iterate_phdr(count_object, &objects);
      _exit(objects > 0 ? 0 : 1);
    }
    if (pid < 0)
      return 1;
    int status = -1;
    for (int waited = 0; waited < 500; waited++) {
      if (waitpid(pid, &status, WNOHANG) == pid)
        break;
      struct timespec tick = {0, 10000000};
      nanosleep(&tick, NULL);
      status = -1;
    }
    if (status == -1) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      hung++;
    }
  }
  atomic_store(&loader_stop, 1);
  pthread_join(t, NULL);
  printf("forks=%d hung=%d\n", n, hung);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  if (strcmp(argv[1], "fork-loader") == 0 && argc == 3)
    return fork_loader(atoi(argv[2]));
  if (strcmp(argv[1], "shares") == 0 && argc == 4)
    return shares(atoi(argv[2]), atof(argv[3]));
  if (strcmp(argv[1], "exit3") == 0) {
    work_alpha(300000000);
    exit(3);
  }
  if (strcmp(argv[1], "_exit") == 0) {
    work_alpha(300000000);
    _exit(4);
  }
  if (strcmp(argv[1], "_Exit") == 0) {
    work_alpha(300000000);
    _Exit(5);
  }
  if (strcmp(argv[1], "handler-exit") == 0) {
    struct sigaction sa = {.sa_handler = exit_in_handler};
    sigaction(SIGTERM, &sa, NULL);
    work_alpha(300000000);
    raise(SIGTERM);
    return 1;
  }
  if (strcmp(argv[1], "fault-exit") == 0) {
    static char alt[65536];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    sigaltstack(&ss, NULL);
    struct sigaction sa = {.sa_handler = exit_in_handler,
                           .sa_flags = SA_ONSTACK | SA_NODEFER};
    sigaction(SIGSEGV, &sa, NULL);
    work_alpha(300000000);
    return *(volatile int *)(uintptr_t)8;
  }
  if (strcmp(argv[1], "longjmp-exit") == 0)
    return longjmp_exit();
  if (strcmp(argv[1], "longjmp-handler-exit") == 0)
    return longjmp_handler_exit();
  if (strcmp(argv[1], "fork-_exit") == 0) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      work_beta(300000000);
      _exit(0);
    }
    work_alpha(200000000);
    return wait_status(pid);
  }
  if (strcmp(argv[1], "vfork-_exit") == 0 && argc == 3)
    return vfork_underscore_exit(atoi(argv[2]));
  if (strcmp(argv[1], "main-pthread-exit") == 0) {
    /* main leaves with pthread_exit; a worker computes, then returns: the
     * process ends with the worker (exit status 0). */
    pthread_t t;
    if (pthread_create(&t, NULL, main_exit_worker, NULL) != 0)
      return 1;
    pthread_exit(NULL);
  }
  if (strcmp(argv[1], "lone-pthread-exit") == 0) {
    work_alpha(200000000);
    pthread_exit(NULL); /* the only application thread */
  }
  if (strcmp(argv[1], "sigterm") == 0) {
    work_alpha(300000000);
    raise(SIGTERM);
    return 0;
  }
  if (strcmp(argv[1], "close-fds") == 0)
    return close_fds();
  if (strcmp(argv[1], "threads200") == 0)
    return threads200();
  if (strcmp(argv[1], "deep") == 0)
    return deep(300) > 0 ? 0 : 1;
  if (strcmp(argv[1], "dlopen") == 0 && argc == 3)
    return dlopen_work(argv[2]);
  if (strcmp(argv[1], "dlopen-quick") == 0 && argc == 3)
    return dlopen_quick(argv[2]);
  if (strcmp(argv[1], "dlopen-profiler") == 0 && argc == 3)
    return dlopen_profiler(argv[2]);
  if (strcmp(argv[1], "fork") == 0)
    return forking();
  if (strcmp(argv[1], "prefork") == 0)
    return preforking();
  if (strcmp(argv[1], "fork-short") == 0)
    return fork_short();
  if (strcmp(argv[1], "fork-hooks") == 0)
    return fork_hooks();
  if (strcmp(argv[1], "fork-late") == 0 && (argc == 3 || argc == 4))
    return fork_late(atoi(argv[2]), argc == 4 ? atoi(argv[3]) : 0);
  if (strcmp(argv[1], "exec-chain") == 0 && argc == 3)
    return exec_chain(atoi(argv[2]));
  if (strcmp(argv[1], "exec-fail") == 0)
    return exec_fail();
  if (strcmp(argv[1], "exec-ignoring") == 0)
    return exec_ignoring();
  if (strcmp(argv[1], "spawn-ignoring") == 0)
    return spawn_ignoring();
  if (strcmp(argv[1], "spawn-preload") == 0)
    return spawn_preload(argv[0]);
  if (strcmp(argv[1], "vfork-exec") == 0 && argc == 3)
    return vfork_exec(atoi(argv[2]));
  if (strcmp(argv[1], "print-preload") == 0) {
    /* As exec gave it: the profiler's start may have edited the
     * process's own since. */
    const char *v = "";
    for (char **e = initial_environment(); *e; e++)
      if (strncmp(*e, "LD_PRELOAD=", 11) == 0)
        v = *e + 11;
    printf("LD_PRELOAD=[%s]\n", v);
    return 0;
  }
  if (strcmp(argv[1], "own-sigprof") == 0)
    return own_sigprof();
  if (strcmp(argv[1], "own-sigvtalrm") == 0)
    return own_sigvtalrm();
  if (strcmp(argv[1], "masked") == 0 && (argc == 3 || argc == 4))
    return masked(atof(argv[2]), argc == 4 && strncmp(argv[3], "rt", 2) == 0,
                  argc == 4 && strncmp(argv[3], "rt-full", 7) == 0,
                  argc < 4                                  ? 0
                  : strcmp(argv[3], "rt-full-handler") == 0 ? 1
                  : strcmp(argv[3], "rt-full-ignore") == 0  ? 2
                                                            : 0);
  if (strcmp(argv[1], "preempted") == 0 && argc == 3)
    return preempted(atof(argv[2]));
  if (strcmp(argv[1], "switchy") == 0 && argc == 3)
    return switchy(atof(argv[2]));
  if (strcmp(argv[1], "phases") == 0 && argc == 4)
    return phases(atof(argv[2]), atof(argv[3]));
  if (strcmp(argv[1], "read-zero") == 0 && argc == 3)
    return read_zero_main(atof(argv[2]));
  if (strcmp(argv[1], "read-zero-threaded") == 0 && argc == 3)
    return read_zero_threaded(atof(argv[2]));
  if (strcmp(argv[1], "handler-work") == 0 && argc == 3)
    return handler_work(atof(argv[2]));
  if (strcmp(argv[1], "random-blocks") == 0 && argc == 4)
    return random_blocks(atof(argv[2]), atof(argv[3]));
  return 2;
}
