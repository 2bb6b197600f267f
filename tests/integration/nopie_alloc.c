/* An executable built without -fPIE that takes the addresses of malloc and
 * free (so it exports canonical PLT entries for them) and allocates through
 * those pointers on two threads. Under the preloaded profiler it must run
 * exactly as without it, with its allocations sampled. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *(*volatile alloc_fn)(size_t);
static void (*volatile free_fn)(void *);

__attribute__((noinline)) static void *nopie_allocate(size_t n) {
  void *p = alloc_fn(n);
  if (p)
    memset(p, 1, n);
  return p;
}

static void *worker(void *arg) {
  (void)arg;
  size_t bad = 0;
  for (int i = 0; i < 20000; i++) {
    void *p = nopie_allocate(4096 + (size_t)(i % 64));
    bad += p == NULL;
    free_fn(p);
  }
  return (void *)bad;
}

int main(void) {
  /* Taken in code built without -fPIE: absolute references, so the linker
   * makes the PLT entries the functions' addresses. */
  alloc_fn = malloc;
  free_fn = free;
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, worker, NULL);
  size_t bad = 0;
  for (int i = 0; i < 2; i++) {
    void *r;
    pthread_join(t[i], &r);
    bad += (size_t)r;
  }
  printf("nopie_failures=%zu\n", bad);
  return bad != 0;
}
