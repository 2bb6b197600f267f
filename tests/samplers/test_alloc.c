/* The malloc hooks (alloc.c) keep the underlying allocator's contract: every
 * hooked call gives the results, errno and alignment that glibc's own gives
 * (called here through dlsym(RTLD_NEXT)), with the profiler off and with
 * every allocation sampled. The live table tracks sampled blocks until free
 * or realloc, under many threads, and counts what it cannot hold. This test
 * links the profiler's objects, so its own malloc is the hook. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "contprof/profiler.h"
#include "interpose/real.h"
#include "samplers/heap_table.h"
#include "test.h"
#include "thread_state.h"

typedef void *(*malloc_fn)(size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void *(*memalign_fn)(size_t, size_t);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);

static struct {
  malloc_fn malloc;
  realloc_fn realloc;
  memalign_fn aligned_alloc, memalign;
  posix_memalign_fn posix_memalign;
  void (*free)(void *);
} libc;

static void load_libc(void) {
  libc.malloc = (malloc_fn)dlsym(RTLD_NEXT, "malloc");
  libc.realloc = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
  libc.aligned_alloc = (memalign_fn)dlsym(RTLD_NEXT, "aligned_alloc");
  libc.memalign = (memalign_fn)dlsym(RTLD_NEXT, "memalign");
  libc.posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
  libc.free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
}

/* Keeps the compiler from folding calls whose results it thinks it knows. */
static volatile size_t huge = SIZE_MAX;
static volatile size_t half = SIZE_MAX / 2 + 1;

static int aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

/* Every contract, checked against glibc's own answer. */
static void check_conformance(void) {
  /* malloc */
  void *p = malloc(0), *q = libc.malloc(0);
  CHECK_EQ_INT(p != NULL, q != NULL);
  free(p);
  libc.free(q);
  errno = 0;
  CHECK(malloc(huge) == NULL);
  CHECK_EQ_INT(errno, ENOMEM);
  errno = 0;
  CHECK(malloc(huge / 2 + 1) == NULL);
  CHECK_EQ_INT(errno, ENOMEM);
  errno = 777; /* success leaves errno alone, also when sampled */
  p = malloc(100);
  CHECK(p != NULL && aligned(p, 16));
  CHECK_EQ_INT(errno, 777);
  CHECK(malloc_usable_size(p) >= 100);
  CHECK_EQ_INT(malloc_usable_size(NULL), 0);

  /* realloc: grow keeps the bytes, failure keeps the block */
  memset(p, 0x5a, 100);
  p = realloc(p, 5000);
  CHECK(p != NULL && ((unsigned char *)p)[99] == 0x5a);
  errno = 0;
  CHECK(realloc(p, huge) == NULL);
  CHECK_EQ_INT(errno, ENOMEM);
  CHECK(((unsigned char *)p)[0] == 0x5a);
  /* realloc(p, 0) frees like glibc's (NULL or a minimum block) */
  q = libc.realloc(libc.malloc(10), 0);
  void *r = realloc(p, 0);
  CHECK_EQ_INT(r != NULL, q != NULL);
  free(r);
  libc.free(q);
  p = realloc(NULL, 64);
  CHECK(p != NULL && malloc_usable_size(p) >= 64);
  free(p);

  /* calloc: zeroed even when the memory was used, overflow is ENOMEM */
  p = malloc(4096);
  memset(p, 0xff, 4096);
  free(p);
  unsigned char *z = calloc(4096, 1);
  int zero = z != NULL;
  for (size_t i = 0; z && i < 4096; i++)
    zero &= z[i] == 0;
  CHECK(zero);
  free(z);
  errno = 0;
  CHECK(calloc(huge / 2, 3) == NULL);
  CHECK_EQ_INT(errno, ENOMEM);
  p = calloc(0, 8);
  q = libc.malloc(0);
  CHECK_EQ_INT(p != NULL, q != NULL);
  free(p);
  libc.free(q);

  /* reallocarray: overflow is ENOMEM and the block stays */
  errno = 0;
  CHECK(reallocarray(NULL, half, 2) == NULL);
  CHECK_EQ_INT(errno, ENOMEM);
  p = reallocarray(NULL, 10, 8);
  CHECK(p != NULL && malloc_usable_size(p) >= 80);
  memset(p, 1, 80);
  errno = 0;
  CHECK(reallocarray(p, half, 2) == NULL);
  CHECK_EQ_INT(errno, ENOMEM);
  CHECK(((unsigned char *)p)[79] == 1);
  p = reallocarray(p, 100, 8);
  CHECK(p != NULL && ((unsigned char *)p)[79] == 1);
  free(p);

  /* posix_memalign: errors are returned, errno is untouched */
  static const size_t bad[] = {0, 1, 3, 4, 24, 4097};
  for (size_t i = 0; i < CP_ARRAY_SIZE(bad); i++) {
    errno = 12345;
    void *out = (void *)0x1;
    int rc = posix_memalign(&out, bad[i], 64);
    int errno_ours = errno;
    errno = 12345;
    void *out2 = (void *)0x1;
    int rc2 = libc.posix_memalign(&out2, bad[i], 64);
    CHECK_EQ_INT(rc, rc2);
    CHECK_EQ_INT(rc, EINVAL);
    CHECK_EQ_INT(errno_ours, errno);
    CHECK(out == (void *)0x1);
  }
  for (size_t a = sizeof(void *); a <= ((size_t)1 << 20); a <<= 1) {
    void *out = NULL;
    CHECK_EQ_INT(posix_memalign(&out, a, a + 3), 0);
    CHECK(out != NULL && aligned(out, a) && malloc_usable_size(out) >= a + 3);
    free(out);
  }
  {
    errno = 12345;
    void *out = NULL;
    int rc = posix_memalign(&out, 64, huge - 4096);
    int errno_ours = errno;
    errno = 12345;
    int rc2 = libc.posix_memalign(&out, 64, huge - 4096);
    CHECK_EQ_INT(rc, ENOMEM);
    CHECK_EQ_INT(rc, rc2);
    CHECK_EQ_INT(errno_ours, errno);
  }

  /* aligned_alloc and memalign: as glibc, including odd alignments */
  static const size_t aligns[] = {1, 3, 8, 16, 24, 64, 4096, 1 << 16};
  for (size_t i = 0; i < CP_ARRAY_SIZE(aligns); i++) {
    size_t a = aligns[i];
    errno = 0;
    p = aligned_alloc(a, 2 * a);
    int e1 = errno;
    errno = 0;
    q = libc.aligned_alloc(a, 2 * a);
    CHECK_EQ_INT(p != NULL, q != NULL);
    CHECK_EQ_INT(e1, errno);
    if (p && (a & (a - 1)) == 0)
      CHECK(aligned(p, a));
    free(p);
    libc.free(q);
    errno = 0;
    p = memalign(a, 100);
    e1 = errno;
    errno = 0;
    q = libc.memalign(a, 100);
    CHECK_EQ_INT(p != NULL, q != NULL);
    CHECK_EQ_INT(e1, errno);
    if (p && (a & (a - 1)) == 0)
      CHECK(aligned(p, a));
    free(p);
    libc.free(q);
  }
  errno = 0;
  CHECK(aligned_alloc(64, huge - 4096) == NULL);
  if (!CP_TEST_SANITIZED) /* ASan's says EINVAL: not a multiple of 64 */
    CHECK_EQ_INT(errno, ENOMEM);
  errno = 0;
  CHECK(memalign(64, huge - 4096) == NULL);
  CHECK_EQ_INT(errno, ENOMEM);

  /* valloc and pvalloc: page aligned; pvalloc rounds the size up */
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  p = valloc(100);
  CHECK(p != NULL && aligned(p, page) && malloc_usable_size(p) >= 100);
  free(p);
  p = pvalloc(100);
  CHECK(p != NULL && aligned(p, page) && malloc_usable_size(p) >= page);
  free(p);
  errno = 0;
  CHECK(valloc(huge - 4096) == NULL);
  CHECK_EQ_INT(errno, ENOMEM);
  errno = 0;
  CHECK(pvalloc(huge - 4096) == NULL);
  CHECK_EQ_INT(errno, ENOMEM);
  free(NULL);
}

static char *out_dir;

/* Starts with every allocation sampled (1 byte between samples), alloc and
 * heap, and a table of 1024 entries (the first start makes the table). */
/* Every allocation sampled: profiles "alloc,heap" (each sample through the
 * ring as well), or "heap" for the tests that count what the live table
 * holds: a ring that fills while the drain thread waits for a CPU (a loaded
 * machine) thins the samples instead (docs/overhead.md, "A filling ring"),
 * and 1 run in 6 of test_table_full_is_counted under two busy loops found
 * allocations neither tracked nor counted as overflows. */
static int start_sampling(const char *profiles) {
  setenv("CONTPROF_ALLOC_SAMPLE_BYTES", "1", 1);
  setenv("CONTPROF_HEAP_MAX_TRACKED", "1024", 1);
  setenv("CONTPROF_LOG_LEVEL", "error", 1);
  contprof_options o = {
      .profiles = profiles, .output_dir = out_dir, .upload_period_s = 3600};
  return contprof_start(&o);
}

static int start_sampling_everything(void) { return start_sampling("heap"); }

static void test_conformance_profiler_off(void) { check_conformance(); }

static void test_conformance_every_allocation_sampled(void) {
  CHECK_EQ_INT(start_sampling("alloc,heap"), 0);
  check_conformance();
  contprof_stop();
}

__attribute__((noinline)) static void *hold_block(size_t n) {
  return malloc(n);
}

static void test_free_and_realloc_untrack(void) {
  CHECK_EQ_INT(start_sampling_everything(), 0);
  long before = cp_heap_count_live();
  void *blocks[100];
  for (int i = 0; i < 100; i++)
    blocks[i] = hold_block(100 + (size_t)i);
  CHECK_EQ_INT(cp_heap_count_live() - before, 100);
  /* realloc: the old address leaves the table, the new one enters */
  void *moved = realloc(blocks[0], 1 << 20);
  CHECK(moved != NULL);
  CHECK_EQ_INT(cp_heap_count_live() - before, 100);
  blocks[0] = moved;
  for (int i = 0; i < 100; i++)
    free(blocks[i]);
  CHECK_EQ_INT(cp_heap_count_live() - before, 0);
  /* Untracked frees (allocated while not sampling) are harmless. */
  contprof_stop();
  void *p = malloc(64);
  CHECK_EQ_INT(cp_heap_untrack((uintptr_t)p), 0);
  free(p);
  CHECK_EQ_INT(cp_heap_count_live() - before, 0);
}

static void test_table_full_is_counted(void) {
  CHECK_EQ_INT(start_sampling_everything(), 0);
  uint64_t overflows = cp_heap_overflows();
  long before = cp_heap_count_live();
  size_t n = 3000;
  static void *blocks[3000];
  for (size_t i = 0; i < n; i++)
    blocks[i] = hold_block(32);
  long tracked = cp_heap_count_live() - before;
  /* The table holds 1024; the rest is counted, not silently lost. */
  CHECK(tracked + before <= 1024);
  CHECK((uint64_t)((long)n - tracked) <= cp_heap_overflows() - overflows);
  for (size_t i = 0; i < n; i++)
    free(blocks[i]);
  CHECK_EQ_INT(cp_heap_count_live() - before, 0);
  contprof_stop();
}

/* A child of fork starts with an empty live table (its in-use profile is
 * its own), frees the parent's tracked blocks harmlessly, and tracks its
 * own. The table's pages reach the child as fresh zero pages: that empty
 * table is all zero. */
static int child_table(void **parents, int n) {
  int failures = cp_heap_count_live() != 0;
  for (int i = 0; i < n; i++)
    free(parents[i]);
  void *mine[50];
  for (int i = 0; i < 50; i++)
    mine[i] = hold_block(64);
  failures += cp_heap_count_live() != 50;
  for (int i = 0; i < 50; i++)
    free(mine[i]);
  failures += cp_heap_count_live() != 0;
  return failures;
}

static void test_fork_child_starts_empty(void) {
  CHECK_EQ_INT(start_sampling_everything(), 0);
  long before = cp_heap_count_live();
  void *blocks[200];
  for (int i = 0; i < 200; i++)
    blocks[i] = hold_block(48);
  CHECK_EQ_INT(cp_heap_count_live() - before, 200);
  fflush(NULL);
  pid_t child = fork();
  if (child == 0)
    _exit(child_table(blocks, 200));
  int status = -1;
  CHECK(child > 0 && waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* The parent's table is its own. */
  CHECK_EQ_INT(cp_heap_count_live() - before, 200);
  for (int i = 0; i < 200; i++)
    free(blocks[i]);
  CHECK_EQ_INT(cp_heap_count_live() - before, 0);
  contprof_stop();
}

/* Fills the table: how many of n blocks it tracks; -1 when the rest are
 * not each counted as an overflow (an entry handed out twice tracks two
 * blocks). */
static long fill_table(void **blocks, size_t n) {
  long before = cp_heap_count_live();
  uint64_t overflows = cp_heap_overflows();
  for (size_t i = 0; i < n; i++)
    blocks[i] = hold_block(40);
  long tracked = cp_heap_count_live() - before;
  return (uint64_t)tracked + cp_heap_overflows() - overflows == n ? tracked
                                                                  : -1;
}

/* Tracks 16 blocks and frees them: the calling thread, if the
 * pthread_create hook started it, keeps the last entries they free. */
static void keep_entries(void) {
  void *blocks[16];
  for (int i = 0; i < 16; i++)
    blocks[i] = hold_block(24);
  for (int i = 0; i < 16; i++)
    free(blocks[i]);
}

/* A thread keeps a few free entries of its own (the ones its tracked frees
 * gave back); they come back to everyone when it ends, however it ends. */
static void *sample_and_free(void *arg) {
  keep_entries();
  if (arg)
    pthread_exit(NULL);
  return NULL;
}

static void test_entries_kept_by_a_thread_come_back(void) {
  CHECK_EQ_INT(start_sampling_everything(), 0);
  pthread_t t[64];
  for (uintptr_t i = 0; i < 64; i++)
    CHECK_EQ_INT(pthread_create(&t[i], NULL, sample_and_free, (void *)(i & 1)),
                 0);
  for (int i = 0; i < 64; i++)
    pthread_join(t[i], NULL);
  /* Every entry the table has is there to be taken: none stayed with the 64
   * ended threads (up to 4 each). */
  long live = cp_heap_count_live();
  static void *blocks[1100];
  long tracked = fill_table(blocks, 1100);
  CHECK_EQ_INT(live + tracked, 1024);
  for (size_t i = 0; i < 1100; i++)
    free(blocks[i]);
  CHECK_EQ_INT(cp_heap_count_live(), live);
  contprof_stop();
}

/* A thread that kept entries forks: its child's table is empty, and each of
 * its entries is handed out once (the kept ones named the parent's). */
static void *fork_with_kept_entries(void *arg) {
  (void)arg;
  keep_entries();
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    static void *mine[1100];
    long tracked = fill_table(mine, 1100);
    for (size_t i = 0; i < 1100; i++)
      free(mine[i]);
    _exit(tracked == 1024 && cp_heap_count_live() == 0 ? 0 : 1);
  }
  int status = -1;
  if (child < 0 || waitpid(child, &status, 0) != child)
    return (void *)1;
  return (void *)(uintptr_t) !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_fork_child_hands_each_entry_out_once(void) {
  CHECK_EQ_INT(start_sampling_everything(), 0);
  pthread_t t;
  void *failed = (void *)1;
  CHECK_EQ_INT(pthread_create(&t, NULL, fork_with_kept_entries, NULL), 0);
  pthread_join(t, &failed);
  CHECK(failed == NULL);
  contprof_stop();
}

/* Threads allocating, growing and freeing at random while every allocation
 * is sampled: nothing tracked is left once everything is freed, and the
 * blocks' contents survive. */
static _Atomic int stress_errors;

static void *stress_thread(void *arg) {
  uint64_t x = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull;
  unsigned char *live[32] = {0};
  size_t size[32] = {0};
  for (int i = 0; i < 20000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    int k = (int)(x % 32);
    if (live[k] && live[k][0] != (unsigned char)k)
      stress_errors++;
    size_t n = 1 + (size_t)(x >> 40) % 2000;
    if (x & (1ull << 33)) {
      unsigned char *q = realloc(live[k], n);
      if (!q) {
        stress_errors++;
        continue;
      }
      live[k] = q;
    } else {
      free(live[k]);
      live[k] = (x & (1ull << 34)) ? calloc(1, n) : aligned_alloc(64, 64 * n);
    }
    size[k] = n;
    if (live[k])
      live[k][0] = (unsigned char)k;
  }
  for (int k = 0; k < 32; k++)
    free(live[k]);
  (void)size;
  return NULL;
}

static void test_threads_stress(void) {
  CHECK_EQ_INT(start_sampling_everything(), 0);
  long before = cp_heap_count_live();
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++)
    pthread_create(&t[i], NULL, stress_thread, (void *)(i + 1));
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  CHECK_EQ_INT(stress_errors, 0);
  /* Everything the threads allocated is freed; what may stay tracked is
   * glibc's per-thread block (the DTV, calloc'd by the creating thread),
   * kept live with the exited thread's cached stack. */
  if (cp_heap_count_live() - before > 4)
    fprintf(stderr, "still tracked: %ld\n", cp_heap_count_live() - before);
  CHECK(cp_heap_count_live() - before <= 4);
  contprof_stop();
}

/* Addresses of one filter bucket, one per thread, each tracked, looked up
 * and untracked over and over: the filter must answer "may be tracked"
 * whenever one of them is tracked, however the threads' adds and removes
 * interleave (the free hook reads the filter alone: a wrong "no" there, even
 * for a moment, leaves a freed block in the live heap for good). A bit per
 * bucket, tried (docs/benchmarks.md, "A bit per bucket"), failed this twice
 * before it was right. */
#define FILTER_THREADS 4
static uintptr_t filter_addrs[FILTER_THREADS];
static _Atomic int filter_misses;

static void *filter_thread(void *arg) {
  uintptr_t addr = filter_addrs[(uintptr_t)arg];
  for (int i = 0; i < 200000; i++) {
    cp_heap_entry *e = cp_heap_entry_take();
    if (!e)
      continue;
    e->tid = 0;
    e->labels = 0;
    e->count = 1;
    e->bytes = 8;
    e->nframes = 0;
    e->truncated = 0;
    cp_heap_entry_publish(e, addr);
    if (!cp_heap_may_track(addr))
      filter_misses++;
    if (!cp_heap_untrack(addr))
      filter_misses++;
  }
  return NULL;
}

static void test_filter_bucket_shared_by_threads(void) {
  CHECK_EQ_INT(start_sampling_everything(), 0);
  contprof_stop(); /* the table stays; nothing else is tracked meanwhile */
  /* High, 8-aligned addresses no allocator hands out here, all in the
   * bucket of the first. */
  uintptr_t a = (uintptr_t)0x7e0000000000ull;
  size_t bucket = cp_heap_filter_of(a);
  size_t n = 0;
  for (; n < FILTER_THREADS; a += 8)
    if (cp_heap_filter_of(a) == bucket)
      filter_addrs[n++] = a;
  pthread_t t[FILTER_THREADS];
  for (uintptr_t i = 0; i < FILTER_THREADS; i++)
    pthread_create(&t[i], NULL, filter_thread, (void *)i);
  for (int i = 0; i < FILTER_THREADS; i++)
    pthread_join(t[i], NULL);
  CHECK_EQ_INT(filter_misses, 0);
  CHECK_EQ_INT(cp_heap_may_track(filter_addrs[0]), 0);
}

/* Blocks of the bootstrap arena (what the hooks hand out while the real
 * allocator is being found), taken before anything else of the test runs:
 * a thread that is resolving gets them. */
static void *boot_blocks[2];
__attribute__((constructor(101))) static void take_boot_blocks(void) {
  cp_thread.resolving++;
  boot_blocks[0] = malloc(40);
  boot_blocks[1] = malloc(24);
  cp_thread.resolving--;
}

/* The free hook tests no address range: a bootstrap block reaches its slow
 * path through the filter (cp_heap_mark_always), with the heap profile off,
 * and is left alone there (free) or copied into a real block (realloc),
 * never handed to the real allocator, whose free would abort on it. */
static void test_bootstrap_blocks_stay_ours(void) {
  if (!cp_interpose_malloc_boot_block(boot_blocks[0]) ||
      !cp_interpose_malloc_boot_block(boot_blocks[1])) {
    printf("SKIP test_bootstrap_blocks_stay_ours: the allocator was found "
           "before the test's first constructor\n");
    return;
  }
  memset(boot_blocks[0], 7, 40);
  char *q = realloc(boot_blocks[0], 4000);
  CHECK(q != NULL && !cp_interpose_malloc_boot_block(q));
  if (q) {
    CHECK(q[0] == 7 && q[39] == 7);
    free(q);
  }
  free(boot_blocks[1]); /* aborted in glibc's free without the mark */
  CHECK(malloc_usable_size(boot_blocks[1]) == 24);
}

int main(void) {
  load_libc();
  char tmpl[] = "/tmp/contprof-alloc-unit-XXXXXX";
  out_dir = mkdtemp(tmpl);
  test_case tests[] = {
      T(test_bootstrap_blocks_stay_ours),
      T(test_conformance_profiler_off),
      T(test_conformance_every_allocation_sampled),
      T(test_free_and_realloc_untrack),
      T(test_table_full_is_counted),
      T(test_fork_child_starts_empty),
      T(test_entries_kept_by_a_thread_come_back),
      T(test_fork_child_hands_each_entry_out_once),
      T(test_threads_stress),
      T(test_filter_bucket_shared_by_threads),
  };
  int failed = 0;
  for (size_t i = 0; i < CP_ARRAY_SIZE(tests); i++) {
    int before = test_failures;
    tests[i].fn();
    int ok = test_failures == before;
    failed += !ok;
    printf("%s %s\n", ok ? "PASS" : "FAIL", tests[i].name);
  }
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", out_dir);
  if (system(cmd) != 0)
    failed++;
  return failed ? 1 : 0;
}
