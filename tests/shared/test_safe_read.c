/* Safe copies (src/safe_read.c): a read of unmapped, PROT_NONE or
 * truncated-file memory returns the faulting address instead of killing
 * the process; every other fault still reaches the application's handler,
 * or the default action; a region unmapped and mapped again while another
 * thread copies from it never crashes. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "safe_read.h"
#include "test.h"

#define PAGE 4096

static void test_copies_mapped_memory(void) {
  CHECK_EQ_INT(cp_safe_read_install(), 0);
  CHECK(cp_safe_read_ready());
  char src[300], dst[300];
  for (size_t i = 0; i < sizeof src; i++)
    src[i] = (char)(i * 7);
  memset(dst, 0, sizeof dst);
  CHECK_EQ_INT(cp_safe_copy(dst, src, sizeof src), 0);
  CHECK(memcmp(dst, src, sizeof src) == 0);
  CHECK_EQ_INT(cp_safe_copy(dst, src, 0), 0);
}

/* Two pages, the second unmapped or PROT_NONE: a copy across them gets
 * the first page's bytes and the second page's address. */
static void test_unmapped_and_protected(void) {
  CHECK_EQ_INT(cp_safe_read_install(), 0);
  for (int prot_none = 0; prot_none < 2; prot_none++) {
    char *m = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    memset(m, 'x', PAGE);
    if (prot_none)
      CHECK_EQ_INT(mprotect(m + PAGE, PAGE, PROT_NONE), 0);
    else
      CHECK_EQ_INT(munmap(m + PAGE, PAGE), 0);
    static char dst[2 * PAGE];
    uint64_t before = cp_safe_read_faults();
    uintptr_t at = cp_safe_copy(dst, m + PAGE - 100, 200);
    CHECK_EQ_INT(at, (uintptr_t)(m + PAGE));
    CHECK(dst[0] == 'x' && dst[99] == 'x');
    CHECK_EQ_INT(cp_safe_read_faults(), before + 1);
    /* And the page wholly gone: NULL's page too. */
    CHECK(cp_safe_copy(dst, m + PAGE, 8) == (uintptr_t)(m + PAGE));
    CHECK(cp_safe_copy(dst, (void *)8, 8) == 8);
    munmap(m, prot_none ? 2 * PAGE : PAGE);
  }
}

/* A file mapping past the end of its file: SIGBUS, recovered too. */
static void test_truncated_file_is_sigbus(void) {
  CHECK_EQ_INT(cp_safe_read_install(), 0);
  char path[] = "/tmp/cp_safe_read_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unlink(path);
  CHECK_EQ_INT(ftruncate(fd, PAGE), 0);
  char *m = mmap(NULL, 2 * PAGE, PROT_READ, MAP_SHARED, fd, 0);
  CHECK(m != MAP_FAILED);
  CHECK_EQ_INT(ftruncate(fd, 0), 0);
  char dst[16];
  CHECK_EQ_INT(cp_safe_copy(dst, m + 10, sizeof dst), (uintptr_t)(m + 10));
  munmap(m, 2 * PAGE);
  close(fd);
}

/* The child pid's checks passed: it exited with 0 (a code names the check
 * that failed). */
static void check_child_passed(pid_t pid) {
  int status = 0;
  CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
  CHECK(WIFEXITED(status));
  CHECK_EQ_INT(WEXITSTATUS(status), 0);
}

/* The application's own handler, installed before ours, still gets its
 * faults: this one makes the page writable and returns, and the store that
 * faulted completes. */
static char *app_page;
static _Atomic int app_faults;
static void app_handler(int sig, siginfo_t *info, void *uc) {
  (void)uc;
  if (sig == SIGSEGV && (char *)info->si_addr >= app_page &&
      (char *)info->si_addr < app_page + PAGE) {
    atomic_fetch_add(&app_faults, 1);
    mprotect(app_page, PAGE, PROT_READ | PROT_WRITE);
  } else {
    signal(sig, SIG_DFL); /* not its fault: a crash, not a loop */
  }
}

static void test_application_faults_reach_its_handler(void) {
  /* In a child: its handler is installed before ours is (the order a
   * Python program with faulthandler enabled at start up has). */
  pid_t pid = fork();
  if (pid == 0) {
    struct sigaction sa = {.sa_sigaction = app_handler, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    if (cp_safe_read_install() != 0)
      _exit(10);
    app_page = mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    volatile char *p = app_page;
    p[5] = 42; /* faults once; the application's handler lets it through */
    char dst[8];
    if (p[5] != 42 || atomic_load(&app_faults) != 1)
      _exit(11);
    if (cp_safe_copy(dst, (void *)16, 8) != 16 || atomic_load(&app_faults) != 1)
      _exit(12);
    _exit(0);
  }
  check_child_passed(pid);
}

/* Without an application handler, a real crash is still a crash: killed by
 * SIGSEGV (a core dump where they are on), not hung, not exited. A SIGSEGV
 * sent with kill() is still fatal too. */
static void test_default_action_is_kept(void) {
  static volatile int *volatile bad = (volatile int *)8;
  for (int sent = 0; sent < 2; sent++) {
    pid_t pid = fork();
    if (pid == 0) {
      struct rlimit no_core = {0, 0};
      setrlimit(RLIMIT_CORE, &no_core);
      signal(SIGSEGV, SIG_DFL);
      if (cp_safe_read_install() != 0)
        _exit(10);
      if (sent)
        kill(getpid(), SIGSEGV);
      else
        *bad = 1;
      _exit(0);
    }
    int status = 0;
    CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
  }
}

/* A sent SIGSEGV that the application ignores stays ignored, also when
 * its sigaction said SA_SIGINFO (then sa_sigaction reads as SIG_IGN: not a
 * function to call). */
static void test_ignored_sent_signal_stays_ignored(void) {
  pid_t pid = fork();
  if (pid == 0) {
    struct sigaction ign = {.sa_handler = SIG_IGN, .sa_flags = SA_SIGINFO};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGSEGV, &ign, NULL);
    if (cp_safe_read_install() != 0)
      _exit(10);
    kill(getpid(), SIGSEGV);
    _exit(0);
  }
  check_child_passed(pid);
}

/* Not ready once the application replaced the handler, or on a thread
 * that blocks the signal. */
static void test_ready_tells_when_not_ours(void) {
  pid_t pid = fork();
  if (pid == 0) {
    if (cp_safe_read_install() != 0 || !cp_safe_read_ready())
      _exit(10);
    sigset_t s, old;
    sigemptyset(&s);
    sigaddset(&s, SIGBUS);
    pthread_sigmask(SIG_BLOCK, &s, &old);
    if (cp_safe_read_ready())
      _exit(11);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!cp_safe_read_ready())
      _exit(12);
    struct sigaction sa = {.sa_sigaction = app_handler, .sa_flags = SA_SIGINFO};
    sigaction(SIGSEGV, &sa, NULL);
    if (cp_safe_read_ready())
      _exit(13);
    _exit(0);
  }
  check_child_passed(pid);
}

/* One thread maps and unmaps a region again and again while this one
 * copies from it: every copy either succeeds or names an address in the
 * region. */
static _Atomic int churn_stop;
static char *_Atomic churn_region;
static void *churner(void *arg) {
  (void)arg;
  while (!atomic_load(&churn_stop)) {
    char *m = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
      continue;
    memset(m, 'y', 4 * PAGE);
    atomic_store(&churn_region, m);
    for (volatile int i = 0; i < 200; i++)
      ;
    munmap(m, 4 * PAGE); /* readers still see it for a while */
    for (volatile int i = 0; i < 200; i++)
      ;
    atomic_store(&churn_region, NULL);
  }
  return NULL;
}

static void test_copies_race_unmapping(void) {
  CHECK_EQ_INT(cp_safe_read_install(), 0);
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, churner, NULL), 0);
  static char dst[4 * PAGE];
  long ok = 0, faulted = 0, wrong = 0;
  /* Until both outcomes were seen many times (or 10 s: a loaded machine). */
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((ok > 1000 && faulted > 100) || now.tv_sec - t0.tv_sec > 10)
      break;
    char *m = atomic_load(&churn_region);
    if (!m)
      continue;
    uintptr_t at = cp_safe_copy(dst, m, 4 * PAGE);
    if (!at)
      ok++;
    else if (at >= (uintptr_t)m && at < (uintptr_t)m + 4 * PAGE)
      faulted++;
    else
      wrong++;
  }
  atomic_store(&churn_stop, 1);
  pthread_join(t, NULL);
  printf("copies: %ld whole, %ld faulted, %ld elsewhere\n", ok, faulted, wrong);
  CHECK_EQ_INT(wrong, 0);
  CHECK(ok > 0);
  CHECK(faulted > 0);
}

/* The first three fork before this process installs anything: their
 * children install the handlers after their own, as a program does. */
TEST_MAIN(T(test_application_faults_reach_its_handler),
          T(test_default_action_is_kept),
          T(test_ignored_sent_signal_stays_ignored),
          T(test_copies_mapped_memory), T(test_unmapped_and_protected),
          T(test_truncated_file_is_sigbus), T(test_ready_tells_when_not_ours),
          T(test_copies_race_unmapping))
