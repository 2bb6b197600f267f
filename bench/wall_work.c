/* wall_work: BUSY threads do a FIXED amount of CPU work (so any profiler
 * overhead shows as a longer run) while IDLE threads wait on a condition
 * variable until the work is done: the wall sampler's worst realistic case,
 * many threads of which few run.
 *
 *   wall_work BUSY IDLE ITERATIONS
 *
 * Each busy thread runs ITERATIONS rounds of a floating-point kernel at the
 * bottom of a 24-frame call chain. Prints a checksum. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done;
static long iterations;

NOINLINE static double kernel(double x) {
  for (int i = 0; i < 2000; i++)
    x = x * 1.0000001 + 0.25 / (x + 1.0);
  return x;
}

NOINLINE static double chain(int depth, double x) {
  double r = depth == 0 ? kernel(x) : chain(depth - 1, x + 1e-9);
  __asm__ volatile("" ::: "memory"); /* keeps the frame: no tail call */
  return r;
}

static void *busy(void *arg) {
  double *out = arg, x = 1.0;
  for (long i = 0; i < iterations; i++)
    x = chain(24, x) * 0.5;
  *out = x;
  return NULL;
}

static void *idle(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  while (!done)
    pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: wall_work BUSY IDLE ITERATIONS\n");
    return 2;
  }
  int nbusy = atoi(argv[1]), nidle = atoi(argv[2]);
  iterations = atol(argv[3]);
  pthread_t *t = calloc((size_t)(nbusy + nidle), sizeof *t);
  double *out = calloc((size_t)nbusy, sizeof *out);
  pthread_attr_t small;
  pthread_attr_init(&small);
  pthread_attr_setstacksize(&small, 64 * 1024);
  for (int i = 0; i < nidle; i++)
    if (pthread_create(&t[nbusy + i], &small, idle, NULL) != 0)
      return 1;
  for (int i = 0; i < nbusy; i++)
    pthread_create(&t[i], NULL, busy, &out[i]);
  for (int i = 0; i < nbusy; i++)
    pthread_join(t[i], NULL);
  pthread_mutex_lock(&mu);
  done = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < nidle; i++)
    pthread_join(t[nbusy + i], NULL);
  double sum = 0;
  for (int i = 0; i < nbusy; i++)
    sum += out[i];
  printf("checksum %.6f\n", sum);
  return 0;
}
