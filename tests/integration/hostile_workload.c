/* Programs that do the odd things a process does with signals, exits and the
 * dynamic loader, run unmodified by test_hardening both alone and under
 * `contprof run` (every profile on, at high rates). Each mode prints what it
 * observed on stdout; lines starting with "info " may differ between the two
 * runs (measurements), every other line, the exit status and the death
 * signal must be the same.
 *
 *   sigblock          threads that block every signal compute, sleep and wait
 *                     for signals with sigtimedwait/sigwaitinfo/signalfd on a
 *                     full set: they must get only the application's signals
 *   altstack SIZE [raw]
 *                     a SA_ONSTACK handler computes on a SIZE-byte alternate
 *                     stack; prints whether anything below it was written
 *                     (raw: installed with the raw system call)
 *   eintr             blocking calls, repeatedly, in threads: none may fail
 *                     with EINTR, and pause/sigsuspend return only for the
 *                     application's own signal
 *   segv              a SIGSEGV handler on an alternate stack recovers from
 *                     deliberate faults with siglongjmp, many times
 *   exit N | return N | _exit N | abort | segv-default | sigkill | sigterm
 *                     end the process that way while threads compute
 *   thread-exit N     a non-main thread calls exit(N) while others run
 *   exit-in-malloc N  exit(N) while other threads malloc and free in a loop
 *   exit-in-flush N   exit(N) while a thread calls contprof_flush in a loop
 *   exit-after S N    compute, sleeping now and then, for S seconds; exit(N)
 *   dlopen LIB N      two threads dlopen LIB, call its plugin_work and dlclose
 *                     it N times each while two others compute
 *   fork-exit N       forks N children one after another (or as many as 20 s
 *                     allow), each exiting at once through exit() (its exit
 *                     handlers), and counts those that had not ended 5 s
 *                     later (killed then)
 *   dlopen-tight LIB N  three threads dlopen and dlclose LIB and libz in
 *                     turn, N times each, doing nothing else (the loader's
 *                     lock held as often as can be)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile double sink;

/* Burns ns of this thread's CPU time. */
static unsigned char *alt_area;
static size_t alt_size;
static uintptr_t lowest_burn_frame = UINTPTR_MAX;

__attribute__((noinline)) static void burn(uint64_t ns) {
  uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
  if (frame - (uintptr_t)alt_area < alt_size && frame < lowest_burn_frame)
    lowest_burn_frame = frame; /* on the alternate stack (altstack) */
  uint64_t start = thread_cpu_ns();
  double x = 1.0;
  while (thread_cpu_ns() - start < ns)
    for (int i = 0; i < 200; i++)
      x = x * 1.0000001 + 0.5;
  sink += x;
}

__attribute__((noinline)) void hostile_compute(uint64_t ns) { burn(ns); }

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static _Atomic int stop_all;

/* Computes (and allocates a little, and takes a lock) until stop_all. */
static pthread_mutex_t busy_lock = PTHREAD_MUTEX_INITIALIZER;
static void *busy_thread(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_all)) {
    hostile_compute(2000000);
    void *p = malloc(1000);
    pthread_mutex_lock(&busy_lock);
    sink += 1;
    pthread_mutex_unlock(&busy_lock);
    free(p);
  }
  return NULL;
}

static pthread_t start_busy(void) {
  pthread_t t;
  pthread_create(&t, NULL, busy_thread, NULL);
  return t;
}

/* --- sigblock ------------------------------------------------------------ */

static int block_all_and_compute(void) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  hostile_compute(150000000);
  sleep_ms(50);
  hostile_compute(50000000);
  return 0;
}

static void *sigtimedwait_thread(void *arg) {
  (void)arg;
  block_all_and_compute();
  /* Waits on every signal: only the one the main thread sends may come. */
  sigset_t all;
  sigfillset(&all);
  struct timespec timeout = {5, 0};
  siginfo_t info;
  int sig = sigtimedwait(&all, &info, &timeout);
  return (void *)(intptr_t)(sig == SIGUSR1 ? 1 : -sig);
}

static void *sigwaitinfo_thread(void *arg) {
  (void)arg;
  block_all_and_compute();
  sigset_t all;
  sigfillset(&all);
  siginfo_t info;
  int sig = sigwaitinfo(&all, &info);
  return (void *)(intptr_t)(sig == SIGUSR2 ? 1 : -sig);
}

static void *signalfd_thread(void *arg) {
  (void)arg;
  block_all_and_compute();
  sigset_t all;
  sigfillset(&all);
  int fd = signalfd(-1, &all, SFD_CLOEXEC);
  if (fd < 0)
    return (void *)(intptr_t)-1000;
  struct signalfd_siginfo si;
  ssize_t n;
  while ((n = read(fd, &si, sizeof si)) < 0 && errno == EINTR)
    ;
  close(fd);
  return (void *)(intptr_t)(n == sizeof si && si.ssi_signo == SIGWINCH
                                ? 1
                                : -(int)si.ssi_signo);
}

static void *blocked_compute_thread(void *arg) {
  (void)arg;
  block_all_and_compute();
  hostile_compute(100000000);
  return NULL;
}

static int signals_blocked(void) {
  sigset_t app;
  sigemptyset(&app);
  sigaddset(&app, SIGUSR1);
  sigaddset(&app, SIGUSR2);
  sigaddset(&app, SIGWINCH);
  pthread_sigmask(SIG_BLOCK, &app,
                  NULL); /* inherited: nobody else takes them */
  pthread_t busy = start_busy();
  pthread_t tw, tinfo, tfd, tc;
  pthread_create(&tw, NULL, sigtimedwait_thread, NULL);
  pthread_create(&tinfo, NULL, sigwaitinfo_thread, NULL);
  pthread_create(&tfd, NULL, signalfd_thread, NULL);
  pthread_create(&tc, NULL, blocked_compute_thread, NULL);
  hostile_compute(300000000); /* they compute, sleep and start waiting */
  pthread_kill(tw, SIGUSR1);
  pthread_kill(tinfo, SIGUSR2);
  pthread_kill(tfd, SIGWINCH);
  void *rw, *rinfo, *rfd;
  pthread_join(tw, &rw);
  pthread_join(tinfo, &rinfo);
  pthread_join(tfd, &rfd);
  pthread_join(tc, NULL);
  atomic_store(&stop_all, 1);
  pthread_join(busy, NULL);
  printf("sigtimedwait=%d sigwaitinfo=%d signalfd=%d\n", (int)(intptr_t)rw,
         (int)(intptr_t)rinfo, (int)(intptr_t)rfd);
  return 0;
}

/* --- altstack ------------------------------------------------------------ */

#define PAINT 0xa5
#define BELOW (64 * 1024) /* painted bytes under the alternate stack */

__attribute__((noinline)) static void on_stack_work(void) {
  /* Computes, sleeps a little (a wall sample in a system call) and
   * allocates, on the alternate stack. */
  for (int i = 0; i < 10; i++) {
    hostile_compute(20000000);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    /* Allocates (raise() made this handler run synchronously: not inside
     * malloc): allocation samples are taken on this stack too. */
    void *volatile p = malloc(1 << 20);
    free(p);
  }
}

static void onstack_handler(int sig) {
  (void)sig;
  on_stack_work();
}

/* Installs the handler with the raw system call, as a runtime with its own
 * signal code would: the profiler's sigaction never sees it. The kernel
 * needs glibc's restorer, taken from a handler glibc installed. */
struct kernel_sigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)(void);
  uint64_t mask;
};

static int raw_sigaction_onstack(int sig, void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigaction(SIGURG, &sa, NULL);
  struct kernel_sigaction k;
  if (syscall(SYS_rt_sigaction, SIGURG, NULL, &k, 8) != 0)
    return -1;
  k.handler = handler;
  k.flags |= SA_ONSTACK;
  k.mask = 0;
  return (int)syscall(SYS_rt_sigaction, sig, &k, NULL, 8);
}

static int altstack(size_t size, int raw) {
  alt_area = mmap(NULL, BELOW + size, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (alt_area == MAP_FAILED)
    return 2;
  alt_size = BELOW + size;
  memset(alt_area, PAINT, BELOW + size);
  /* Sampled allocations first: the hooks learn that this thread has no
   * alternate stack, and must notice the one set below. */
  for (int i = 0; i < 16; i++) {
    void *volatile p = malloc(1 << 20);
    free(p);
  }
  stack_t ss = {.ss_sp = alt_area + BELOW, .ss_size = size, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0)
    return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = onstack_handler;
  sa.sa_flags = SA_ONSTACK;
  if (raw ? raw_sigaction_onstack(SIGUSR1, onstack_handler) != 0
          : sigaction(SIGUSR1, &sa, NULL) != 0)
    return 2;
  pthread_t busy = start_busy();
  raise(SIGUSR1); /* the handler runs on the alternate stack */
  atomic_store(&stop_all, 1);
  pthread_join(busy, NULL);
  size_t low = 0;
  while (low < BELOW + size && alt_area[low] == PAINT)
    low++;
  printf("below_written=%d\n", low < BELOW);
  printf("info altstack %zu bytes: %zu used\n", size, BELOW + size - low);
  printf("info computing at %zu bytes deep\n",
         (size_t)((uintptr_t)(alt_area + BELOW + size) - lowest_burn_frame));
  return 0;
}

/* --- eintr --------------------------------------------------------------- */

#define ROUNDS 15
#define WAIT_MS 10

static _Atomic int eintr_failures;
static int pipefd[2];
static sem_t sem_posted, sem_never;
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static int cond_generation;
static int listen_fd;
static struct sockaddr_in listen_addr;
static _Atomic int got_usr1, got_usr2;
static _Atomic int waiters_done;
static pthread_t pause_thread_id, sigsuspend_thread_id, sigtimedwait_id;

static void fail(const char *call, const char *what) {
  printf("%s: %s\n", call, what);
  atomic_fetch_add(&eintr_failures, 1);
}

static void check_rc(const char *call, int failed) {
  if (failed && errno == EINTR)
    fail(call, "EINTR");
  else if (failed)
    fail(call, strerror(errno));
}

/* Between waits: enough CPU that the wall sampler signals the thread again
 * rather than reusing its blocked stack. */
static void between(void) { hostile_compute(200000); }

static void *read_thread(void *a) {
  (void)a;
  for (int i = 0; i < ROUNDS; i++) {
    char c;
    ssize_t n = read(pipefd[0], &c, 1);
    check_rc("read", n != 1);
    between();
  }
  return NULL;
}

static void *sem_thread(void *a) {
  (void)a;
  for (int i = 0; i < ROUNDS; i++) {
    check_rc("sem_wait", sem_wait(&sem_posted) != 0);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += WAIT_MS * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000L;
    }
    int rc = sem_timedwait(&sem_never, &deadline);
    if (rc == 0 || errno != ETIMEDOUT)
      check_rc("sem_timedwait", 1);
    between();
  }
  return NULL;
}

static void *cond_thread(void *a) {
  (void)a;
  for (int i = 0; i < ROUNDS; i++) {
    pthread_mutex_lock(&cond_lock);
    while (cond_generation <= i) /* the waker's broadcasts, counted */
      pthread_cond_wait(&cond, &cond_lock);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += WAIT_MS * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    while (rc == 0) /* wakes for nothing but the deadline */
      rc = pthread_cond_timedwait(&never, &cond_lock, &deadline);
    pthread_mutex_unlock(&cond_lock);
    if (rc != ETIMEDOUT)
      fail("pthread_cond_timedwait", strerror(rc));
    between();
  }
  return NULL;
}

/* With receive timeouts (5 s, never reached): the kernel then returns EINTR
 * for accept and recv whatever SA_RESTART says, and the socket hooks must
 * wait on (interpose/socket_calls.c). */
static void *accept_thread(void *a) {
  (void)a;
  struct timeval timeout = {5, 0};
  setsockopt(listen_fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  for (int i = 0; i < ROUNDS; i++) {
    int fd = accept(listen_fd, NULL, NULL);
    check_rc("accept", fd < 0);
    if (fd >= 0) {
      char c;
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      check_rc("recv", recv(fd, &c, 1, 0) != 1);
      close(fd);
    }
    between();
  }
  return NULL;
}

static void *waitpid_thread(void *a) {
  (void)a;
  for (int i = 0; i < 4; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      struct timespec ts = {0, 50000000};
      syscall(SYS_nanosleep, &ts, NULL);
      _exit(3);
    }
    int status = 0;
    pid_t got = waitpid(pid, &status, 0);
    check_rc("waitpid", got != pid);
    if (got == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 3))
      fail("waitpid", "wrong child status");
    between();
  }
  return NULL;
}

static void *sleepers_thread(void *a) {
  (void)a;
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = pipefd[1]};
  int quiet[2];
  if (pipe(quiet) != 0)
    return NULL;
  ev.data.fd = quiet[0];
  epoll_ctl(ep, EPOLL_CTL_ADD, quiet[0], &ev);
  for (int i = 0; i < ROUNDS; i++) {
    struct timespec ts = {0, WAIT_MS * 1000000L};
    check_rc("nanosleep", nanosleep(&ts, NULL) != 0);
    int rc = clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
    errno = rc;
    check_rc("clock_nanosleep", rc != 0);
    check_rc("usleep", usleep(WAIT_MS * 1000) != 0);
    struct pollfd pfd = {quiet[0], POLLIN, 0};
    check_rc("poll", poll(&pfd, 1, WAIT_MS) != 0);
    check_rc("ppoll", ppoll(&pfd, 1, &ts, NULL) != 0);
    fd_set set;
    FD_ZERO(&set);
    FD_SET(quiet[0], &set);
    struct timeval tv = {0, WAIT_MS * 1000};
    check_rc("select", select(quiet[0] + 1, &set, NULL, NULL, &tv) != 0);
    FD_ZERO(&set);
    FD_SET(quiet[0], &set);
    check_rc("pselect",
             pselect(quiet[0] + 1, &set, NULL, NULL, &ts, NULL) != 0);
    check_rc("epoll_wait", epoll_wait(ep, &ev, 1, WAIT_MS) != 0);
    check_rc("epoll_pwait", epoll_pwait(ep, &ev, 1, WAIT_MS, NULL) != 0);
    between();
  }
  close(ep);
  close(quiet[0]);
  close(quiet[1]);
  return NULL;
}

static void on_usr1(int sig) {
  (void)sig;
  atomic_store(&got_usr1, 1);
}
static void on_usr2(int sig) {
  (void)sig;
  atomic_store(&got_usr2, 1);
}

/* pause() and sigsuspend() return when a handler ran: only the application's
 * handler may end them. */
static void *pause_thread(void *a) {
  (void)a;
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_UNBLOCK, &usr1, NULL);
  for (int i = 0; i < ROUNDS; i++) {
    int rc = pause();
    if (rc != -1 || errno != EINTR)
      fail("pause", "did not return EINTR");
    if (!atomic_exchange(&got_usr1, 0))
      fail("pause", "returned without the application's signal");
    between();
  }
  atomic_fetch_add(&waiters_done, 1);
  return NULL;
}

static void *sigsuspend_thread(void *a) {
  (void)a;
  sigset_t wait_mask;
  pthread_sigmask(SIG_SETMASK, NULL, &wait_mask);
  sigdelset(&wait_mask, SIGUSR2);
  for (int i = 0; i < ROUNDS; i++) {
    int rc = sigsuspend(&wait_mask);
    if (rc != -1 || errno != EINTR)
      fail("sigsuspend", "did not return EINTR");
    if (!atomic_exchange(&got_usr2, 0))
      fail("sigsuspend", "returned without the application's signal");
    between();
  }
  atomic_fetch_add(&waiters_done, 1);
  return NULL;
}

static void *sigtimedwait_eintr_thread(void *a) {
  (void)a;
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  for (int i = 0; i < ROUNDS; i++) {
    struct timespec ts = {0, 200000000};
    int sig = sigtimedwait(&hup, NULL, &ts);
    if (sig != SIGHUP && errno != EAGAIN) /* SIGHUP, or the timeout */
      check_rc("sigtimedwait", 1);
    between();
  }
  atomic_fetch_add(&waiters_done, 1);
  return NULL;
}

/* Wakes every waiter once per WAIT_MS. */
static void *waker_thread(void *a) {
  (void)a;
  for (int i = 0; i < ROUNDS; i++) {
    sleep_ms(WAIT_MS);
    (void)!write(pipefd[1], "x", 1);
    sem_post(&sem_posted);
    pthread_mutex_lock(&cond_lock);
    cond_generation++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&cond_lock);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc;
    do {
      rc = connect(fd, (struct sockaddr *)&listen_addr, sizeof listen_addr);
    } while (0);
    check_rc("connect", rc != 0);
    check_rc("send", send(fd, "y", 1, MSG_NOSIGNAL) != 1);
    close(fd);
  }
  /* The signal waiters: until each has seen its ROUNDS signals (a signal
   * sent while one is not yet waiting is taken by its next wait). */
  while (atomic_load(&waiters_done) < 3) {
    sleep_ms(5);
    pthread_kill(pause_thread_id, SIGUSR1);
    pthread_kill(sigsuspend_thread_id, SIGUSR2);
    pthread_kill(sigtimedwait_id, SIGHUP);
  }
  return NULL;
}

static int eintr(void) {
  if (pipe(pipefd) != 0)
    return 2;
  sem_init(&sem_posted, 0, 0);
  sem_init(&sem_never, 0, 0);
  listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  memset(&listen_addr, 0, sizeof listen_addr);
  listen_addr.sin_family = AF_INET;
  listen_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof listen_addr;
  if (bind(listen_fd, (struct sockaddr *)&listen_addr, sizeof listen_addr) ||
      listen(listen_fd, 64) ||
      getsockname(listen_fd, (struct sockaddr *)&listen_addr, &len))
    return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  sa.sa_handler = on_usr2;
  sigaction(SIGUSR2, &sa, NULL);
  /* Every thread starts with the application's signals blocked; each waiter
   * opens its own. */
  sigset_t app;
  sigemptyset(&app);
  sigaddset(&app, SIGUSR1);
  sigaddset(&app, SIGUSR2);
  sigaddset(&app, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &app, NULL);
  pthread_t busy = start_busy();
  pthread_t t[9];
  int n = 0;
  pthread_create(&t[n++], NULL, read_thread, NULL);
  pthread_create(&t[n++], NULL, sem_thread, NULL);
  pthread_create(&t[n++], NULL, cond_thread, NULL);
  pthread_create(&t[n++], NULL, accept_thread, NULL);
  pthread_create(&t[n++], NULL, waitpid_thread, NULL);
  pthread_create(&t[n++], NULL, sleepers_thread, NULL);
  pthread_create(&pause_thread_id, NULL, pause_thread, NULL);
  t[n++] = pause_thread_id;
  pthread_create(&sigsuspend_thread_id, NULL, sigsuspend_thread, NULL);
  t[n++] = sigsuspend_thread_id;
  pthread_create(&sigtimedwait_id, NULL, sigtimedwait_eintr_thread, NULL);
  t[n++] = sigtimedwait_id;
  pthread_t waker;
  pthread_create(&waker, NULL, waker_thread, NULL);
  /* The waker signals the three signal waiters until they are done: they
   * are joined after it (pthread_kill on a joined thread is undefined). */
  for (int i = 0; i < n - 3; i++)
    pthread_join(t[i], NULL);
  pthread_join(waker, NULL);
  for (int i = n - 3; i < n; i++)
    pthread_join(t[i], NULL);
  atomic_store(&stop_all, 1);
  pthread_join(busy, NULL);
  printf("eintr failures=%d\n", atomic_load(&eintr_failures));
  return 0;
}

/* --- segv ---------------------------------------------------------------- */

static sigjmp_buf segv_jump;
static void *segv_page;
static _Atomic int segv_wrong_addr;

static void on_segv(int sig, siginfo_t *info, void *uc) {
  (void)sig;
  (void)uc;
  if (info->si_addr != segv_page)
    atomic_store(&segv_wrong_addr, 1);
  siglongjmp(segv_jump, 1);
}

static int segv(void) {
  static unsigned char stack[64 * 1024];
  stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack};
  sigaltstack(&ss, NULL);
  segv_page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigaction(SIGSEGV, &sa, NULL);
  pthread_t busy = start_busy();
  int recovered = 0;
  for (int i = 0; i < 10000; i++) {
    if (sigsetjmp(segv_jump, 1) == 0) {
      hostile_compute(20000);
      sink += *(volatile unsigned char *)segv_page;
      printf("not faulted\n");
    } else {
      recovered++;
    }
  }
  atomic_store(&stop_all, 1);
  pthread_join(busy, NULL);
  printf("recovered=%d wrong_addr=%d\n", recovered,
         atomic_load(&segv_wrong_addr));
  return 0;
}

/* --- dlopen ------------------------------------------------------------- */

static const char *plugin_path;
static int plugin_rounds;
static _Atomic int dlopen_failures;

static void *dlopen_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < plugin_rounds; i++) {
    void *h = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      atomic_fetch_add(&dlopen_failures, 1);
      continue;
    }
    void (*work)(uint64_t) = (void (*)(uint64_t))dlsym(h, "plugin_work");
    if (work)
      work(100000);
    else
      atomic_fetch_add(&dlopen_failures, 1);
    dlclose(h);
  }
  return NULL;
}

static void *dlopen_tight_thread(void *arg) {
  const char *libs[] = {plugin_path, "libz.so.1"};
  for (int i = 0; i < plugin_rounds; i++) {
    void *h = dlopen(libs[(i + (int)(intptr_t)arg) % 2], RTLD_NOW | RTLD_LOCAL);
    if (!h)
      atomic_fetch_add(&dlopen_failures, 1);
    else
      dlclose(h);
  }
  return NULL;
}

static int dlopen_tight(const char *path, int rounds) {
  plugin_path = path;
  plugin_rounds = rounds;
  pthread_t t[3];
  for (int i = 0; i < 3; i++)
    pthread_create(&t[i], NULL, dlopen_tight_thread, (void *)(intptr_t)i);
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  printf("dlopen-tight rounds=%d failures=%d\n", 3 * rounds,
         atomic_load(&dlopen_failures));
  return 0;
}

static int fork_exit(int n) {
  int hung = 0, i;
  uint64_t began = mono_ns();
  for (i = 0; i < n && mono_ns() - began < 20000000000ull; i++) {
    pid_t p = fork();
    if (p == 0)
      exit(0);
    if (p < 0)
      return 1;
    int status;
    uint64_t t0 = mono_ns();
    while (waitpid(p, &status, WNOHANG) != p) {
      if (mono_ns() - t0 > 5000000000ull) {
        hung++;
        kill(p, SIGKILL);
        waitpid(p, &status, 0);
        break;
      }
      usleep(500);
    }
  }
  /* How many fit in the time is not compared alone and profiled ("info"). */
  printf("info children=%d\nfork-exit hung=%d\n", i, hung);
  return 0;
}

static int dlopen_loop(const char *path, int rounds) {
  plugin_path = path;
  plugin_rounds = rounds;
  pthread_t busy[2], t[2];
  for (int i = 0; i < 2; i++)
    busy[i] = start_busy();
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, dlopen_thread, NULL);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  atomic_store(&stop_all, 1);
  for (int i = 0; i < 2; i++)
    pthread_join(busy[i], NULL);
  printf("dlopen rounds=%d failures=%d\n", 2 * rounds,
         atomic_load(&dlopen_failures));
  return 0;
}

/* --- exits --------------------------------------------------------------- */

static void *allocating_thread(void *arg) {
  (void)arg;
  void *keep[64] = {0};
  unsigned i = 0;
  for (;;) {
    size_t size = 16 + (i * 7919u) % 8000;
    free(keep[i % 64]);
    keep[i % 64] = malloc(size);
    if (keep[i % 64])
      memset(keep[i % 64], 1, size < 64 ? size : 64);
    i++;
  }
  return NULL;
}

static void *exiting_thread(void *arg) {
  hostile_compute(200000000);
  exit((int)(intptr_t)arg);
}

static void *flushing_thread(void *arg) {
  int (*flush)(void) = (int (*)(void))arg;
  for (;;) {
    if (flush)
      flush();
    sleep_ms(5);
  }
  return NULL;
}

static void start_workers(void) { start_busy(); }

static int exits(const char *how, int code) {
  start_workers();
  hostile_compute(150000000);
  if (strcmp(how, "exit") == 0)
    exit(code);
  if (strcmp(how, "return") == 0)
    return code;
  if (strcmp(how, "_exit") == 0)
    _exit(code);
  if (strcmp(how, "abort") == 0)
    abort();
  if (strcmp(how, "segv-default") == 0)
    return *(volatile int *)(uintptr_t)8;
  if (strcmp(how, "sigkill") == 0)
    kill(getpid(), SIGKILL);
  if (strcmp(how, "sigterm") == 0)
    kill(getpid(), SIGTERM);
  sleep_ms(5000);
  return 99;
}

/* --- thread-storm ---------------------------------------------------------
 * Threads created faster than they start (more at once than the profiler's
 * pool of start slots, which then falls back to malloc): each must run its
 * own routine with its own argument and its creator's signal mask. */

#define STORM_THREADS 400

static _Atomic int storm_wrong;

static void *storm_thread(void *arg) {
  uintptr_t i = (uintptr_t)arg;
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, NULL, &mask);
  /* Creators block SIGUSR2 for odd threads only. */
  if (sigismember(&mask, SIGUSR2) != (int)(i & 1))
    atomic_fetch_add(&storm_wrong, 1);
  void *volatile p = malloc(64 + i);
  free(p);
  return (void *)(i * 7 + 1);
}

static int thread_storm(void) {
  static pthread_t t[STORM_THREADS];
  sigset_t usr2, old;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  int created = 0;
  for (uintptr_t i = 0; i < STORM_THREADS; i++) {
    pthread_sigmask((i & 1) ? SIG_BLOCK : SIG_UNBLOCK, &usr2, &old);
    if (pthread_create(&t[i], NULL, storm_thread, (void *)i) == 0)
      created++;
    else
      t[i] = 0;
  }
  pthread_sigmask(SIG_UNBLOCK, &usr2, NULL);
  for (uintptr_t i = 0; i < STORM_THREADS; i++) {
    void *r;
    if (t[i] && (pthread_join(t[i], &r) != 0 || r != (void *)(i * 7 + 1)))
      atomic_fetch_add(&storm_wrong, 1);
  }
  printf("storm created=%d wrong=%d\n", created, atomic_load(&storm_wrong));
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2)
    return 2;
  const char *mode = argv[1];
  int code = argc > 2 ? atoi(argv[2]) : 0;
  if (strcmp(mode, "sigblock") == 0)
    return signals_blocked();
  if (strcmp(mode, "altstack") == 0 && argc >= 3)
    return altstack((size_t)atol(argv[2]),
                    argc == 4 && !strcmp(argv[3], "raw"));
  if (strcmp(mode, "eintr") == 0)
    return eintr();
  if (strcmp(mode, "segv") == 0)
    return segv();
  if (strcmp(mode, "thread-storm") == 0)
    return thread_storm();
  if (strcmp(mode, "thread-exit") == 0) {
    start_workers();
    pthread_t t;
    pthread_create(&t, NULL, exiting_thread, (void *)(intptr_t)code);
    for (;;)
      hostile_compute(10000000);
  }
  if (strcmp(mode, "exit-in-malloc") == 0) {
    pthread_t t;
    for (int i = 0; i < 3; i++)
      pthread_create(&t, NULL, allocating_thread, NULL);
    hostile_compute(200000000);
    exit(code);
  }
  if (strcmp(mode, "exit-in-flush") == 0) {
    void *flush = dlsym(RTLD_DEFAULT, "contprof_flush");
    pthread_t t;
    pthread_create(&t, NULL, flushing_thread, flush);
    pthread_create(&t, NULL, allocating_thread, NULL);
    hostile_compute(200000000);
    exit(code);
  }
  if (strcmp(mode, "exit-after") == 0 && argc == 4) {
    uint64_t end = mono_ns() + (uint64_t)(atof(argv[2]) * 1e9);
    start_workers();
    while (mono_ns() < end) {
      hostile_compute(20000000);
      sleep_ms(10);
    }
    exit(atoi(argv[3]));
  }
  if (strcmp(mode, "dlopen") == 0 && argc == 4)
    return dlopen_loop(argv[2], atoi(argv[3]));
  if (strcmp(mode, "fork-exit") == 0 && argc == 3)
    return fork_exit(atoi(argv[2]));
  if (strcmp(mode, "dlopen-tight") == 0 && argc == 4)
    return dlopen_tight(argv[2], atoi(argv[3]));
  return exits(mode, code);
}
