/* Programs with known allocation behaviour, run unmodified under
 * `contprof run --profiles alloc,heap` by test_alloc_profile.c:
 *
 *   alloc_workload shares THREADS MIB   alloc_big gets 80% of MIB allocated
 *                                       bytes, alloc_small 20%; all freed
 *   alloc_workload leak LEAK_MIB CHURN_MIB HOLD_MS
 *                                       leak_hold keeps LEAK_MIB live,
 *                                       churn allocates and frees CHURN_MIB,
 *                                       both pausing 1 ms every 2 MiB;
 *                                       after HOLD_MS the leak is freed, and
 *                                       after HOLD_MS more the program exits
 *   alloc_workload fork                 the child frees the parent's blocks
 *   alloc_workload stress THREADS ITERS [no-pvalloc]
 *                                       every hooked call, contents checked
 *   alloc_workload allocator            which allocator answers malloc
 *
 * Each prints its ground truth on stdout. */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define WINDOW 16

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545f4914f6cdd1dull;
}

static uint64_t realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sizes 256 B .. 16 KiB, small and medium objects. */
static size_t pick_size(uint64_t *rng) { return 256 + rng_next(rng) % 16129; }

/* The two allocating functions of the shares mode. A window of recent
 * blocks is kept, so frees are not simply the last allocation. */
NOINLINE static void *alloc_big(size_t n) {
  char *p = malloc(n);
  if (p)
    p[0] = 1;
  __asm__ volatile("" ::: "memory");
  return p;
}

NOINLINE static void *alloc_small(size_t n) {
  char *p = malloc(n);
  if (p)
    p[0] = 2;
  __asm__ volatile("" ::: "memory");
  return p;
}

typedef struct shares_arg {
  uint64_t budget; /* bytes to allocate */
  uint64_t seed;
  uint64_t big, small;
} shares_arg;

static void *shares_thread(void *p) {
  shares_arg *a = p;
  void *window[WINDOW] = {0};
  uint64_t rng = a->seed, done = 0;
  for (unsigned i = 0; done < a->budget; i++) {
    size_t n = pick_size(&rng);
    void *q;
    if (rng_next(&rng) % 10 < 8) {
      q = alloc_big(n);
      a->big += n;
    } else {
      q = alloc_small(n);
      a->small += n;
    }
    done += n;
    free(window[i % WINDOW]);
    window[i % WINDOW] = q;
  }
  for (int i = 0; i < WINDOW; i++)
    free(window[i]);
  return NULL;
}

static int shares(int threads, uint64_t mib) {
  pthread_t t[64];
  shares_arg a[64];
  if (threads < 1 || threads > 64)
    return 2;
  for (int i = 0; i < threads; i++) {
    a[i] = (shares_arg){.budget = (mib << 20) / (uint64_t)threads,
                        .seed = 0x1234567ull * (uint64_t)(i + 1)};
    pthread_create(&t[i], NULL, shares_thread, &a[i]);
  }
  uint64_t big = 0, small = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    big += a[i].big;
    small += a[i].small;
  }
  printf("alloc_big=%llu alloc_small=%llu\n", (unsigned long long)big,
         (unsigned long long)small);
  return 0;
}

/* The leak mode pauses 1 ms after every PACE_BYTES allocated: at the test's
 * 16 KiB mean that is 128 samples, and the ring's 2,048 slots hold 16 such
 * bursts, so a drain thread that gets a share of a loaded machine keeps up
 * and the mean stays the one asked for. Unpaced, a loaded machine filled the
 * ring, the sampler thinned (up to 64 times the mean) and the estimates'
 * standard errors grew several-fold (docs/overhead.md, "A filling ring"). */
#define PACE_BYTES ((uint64_t)2 << 20)

static void pace(uint64_t *since, size_t n) {
  *since += n;
  if (*since >= PACE_BYTES) {
    *since = 0;
    usleep(1000);
  }
}

/* Keeps its blocks: the leak. */
NOINLINE static uint64_t leak_hold(void **keep, size_t max, size_t *count,
                                   uint64_t bytes, uint64_t *rng) {
  uint64_t done = 0, paced = 0;
  while (done < bytes && *count < max) {
    size_t n = pick_size(rng);
    char *p = malloc(n);
    if (!p)
      break;
    memset(p, 7, 64);
    keep[(*count)++] = p;
    done += n;
    pace(&paced, n);
  }
  return done;
}

/* Allocates and frees everything. */
NOINLINE static void churn(uint64_t bytes, uint64_t *rng) {
  void *window[WINDOW] = {0};
  uint64_t done = 0, paced = 0;
  for (unsigned i = 0; done < bytes; i++) {
    size_t n = pick_size(rng);
    char *p = malloc(n);
    if (p)
      p[0] = 3;
    done += n;
    pace(&paced, n);
    free(window[i % WINDOW]);
    window[i % WINDOW] = p;
  }
  for (int i = 0; i < WINDOW; i++)
    free(window[i]);
}

static int leak(uint64_t leak_mib, uint64_t churn_mib, unsigned hold_ms) {
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  size_t max = (size_t)(leak_mib << 20) / 256 + 1;
  /* The pointer array is not malloc'd: it must not count as live heap. */
  void **keep = mmap(NULL, max * sizeof *keep, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (keep == MAP_FAILED)
    return 2;
  size_t count = 0;
  uint64_t leaked = leak_hold(keep, max, &count, leak_mib << 20, &rng);
  churn(churn_mib << 20, &rng);
  printf("leaked=%llu live_from_ns=%llu\n", (unsigned long long)leaked,
         (unsigned long long)realtime_ns());
  fflush(stdout);
  usleep(hold_ms * 1000u);
  uint64_t freed_at = realtime_ns();
  for (size_t i = 0; i < count; i++)
    free(keep[i]);
  printf("freed_from_ns=%llu\n", (unsigned long long)freed_at);
  fflush(stdout);
  usleep(hold_ms * 1000u);
  return 0;
}

static int fork_mode(void) {
  void *blocks[256];
  for (int i = 0; i < 256; i++)
    blocks[i] = malloc(4096 + (size_t)i);
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 256; i++)
      free(blocks[i]);
    uint64_t rng = 42;
    churn(64 << 20, &rng);
    _exit(7);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  for (int i = 0; i < 256; i++)
    free(blocks[i]);
  printf("child=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}

/* Every hooked call, with the contents of each block checked before it is
 * freed or grown: a hook that corrupted or mismatched memory shows here (and
 * under valgrind). */
typedef struct block {
  unsigned char *p;
  size_t n;
  unsigned char tag;
} block;

static void fill(block *b) {
  if (b->p && b->n)
    memset(b->p, b->tag, b->n < 64 ? b->n : 64);
}

static int check(const block *b) {
  for (size_t i = 0; b->p && i < b->n && i < 64; i++)
    if (b->p[i] != b->tag)
      return 0;
  return 1;
}

static _Atomic int stress_errors;
static int stress_pvalloc = 1; /* valgrind aborts on pvalloc */

static void *stress_thread(void *arg) {
  uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  unsigned iters = (unsigned)((uintptr_t)arg >> 8);
  block live[64] = {0};
  for (unsigned i = 0; i < iters; i++) {
    block *b = &live[rng_next(&rng) % 64];
    if (!check(b))
      stress_errors++;
    size_t n = 1 + rng_next(&rng) % 3000;
    unsigned op = (unsigned)(rng_next(&rng) % 10);
    void *q = NULL;
    switch (op) {
    case 0: /* grow or shrink in place or not */
      q = realloc(b->p, n);
      if (q) {
        b->p = q;
        if (!check(&(block){b->p, b->n < n ? b->n : n, b->tag}))
          stress_errors++;
        b->n = n;
      }
      fill(b);
      continue;
    case 1:
      q = reallocarray(b->p, n, 2);
      if (q) {
        b->p = q;
        b->n = 2 * n;
      }
      fill(b);
      continue;
    case 2:
      free(b->p);
      q = calloc(n, 1);
      for (size_t k = 0; q && k < n; k++)
        if (((unsigned char *)q)[k])
          stress_errors++;
      break;
    case 3:
      free(b->p);
      if (posix_memalign(&q, 64, n) != 0 || ((uintptr_t)q & 63))
        stress_errors++;
      break;
    case 4:
      free(b->p);
      q = aligned_alloc(256, (n + 255) & ~(size_t)255);
      if ((uintptr_t)q & 255)
        stress_errors++;
      break;
    case 5:
      free(b->p);
      q = memalign(32, n);
      if ((uintptr_t)q & 31)
        stress_errors++;
      break;
    case 6:
      free(b->p);
      q = rng_next(&rng) % 2 || !stress_pvalloc ? valloc(n) : pvalloc(n);
      if ((uintptr_t)q & 4095)
        stress_errors++;
      break;
    default:
      free(b->p);
      q = malloc(n);
      break;
    }
    b->p = q;
    b->n = q ? n : 0;
    if (q && malloc_usable_size(q) < n)
      stress_errors++;
    b->tag = (unsigned char)(i | 1);
    fill(b);
  }
  for (int i = 0; i < 64; i++) {
    if (!check(&live[i]))
      stress_errors++;
    free(live[i].p);
  }
  return NULL;
}

static int stress(int threads, unsigned iters) {
  pthread_t t[64];
  if (threads < 1 || threads > 64)
    return 2;
  for (int i = 0; i < threads; i++)
    pthread_create(&t[i], NULL, stress_thread,
                   (void *)(((uintptr_t)iters << 8) | (uintptr_t)(i + 1)));
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  printf("stress_errors=%d\n", (int)stress_errors);
  return stress_errors ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "shares") == 0)
    return shares(atoi(argv[2]), strtoull(argv[3], NULL, 10));
  if (argc == 5 && strcmp(argv[1], "leak") == 0)
    return leak(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10),
                (unsigned)atoi(argv[4]));
  if (argc == 2 && strcmp(argv[1], "fork") == 0)
    return fork_mode();
  if ((argc == 4 || argc == 5) && strcmp(argv[1], "stress") == 0) {
    stress_pvalloc = argc == 4;
    return stress(atoi(argv[2]), (unsigned)atoi(argv[3]));
  }
  if (argc == 2 && strcmp(argv[1], "allocator") == 0) {
    printf("jemalloc=%d\n", dlsym(RTLD_DEFAULT, "mallctl") != NULL);
    return 0;
  }
  fprintf(stderr, "usage: see alloc_workload.c\n");
  return 2;
}
