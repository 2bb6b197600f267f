/* An ordinary multithreaded program that knows nothing about profiling: each
 * worker thread spends about 60% of its CPU time in parse_request, 30% in
 * compress_response and 10% in write_log. Run it under the profiler with
 * `contprof run -- ./busy_workers [SECONDS] [THREADS]`. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds_arg = 3.0;

static double thread_cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Burns CPU for `seconds` of this thread's CPU time. */
static double burn(double seconds) {
  double end = thread_cpu_seconds() + seconds, x = 1.0;
  while (thread_cpu_seconds() < end)
    for (int i = 0; i < 2000; i++)
      x = sin(x) + 1.0;
  return x;
}

__attribute__((noinline)) double parse_request(void) { return burn(0.006); }
__attribute__((noinline)) double compress_response(void) { return burn(0.003); }
__attribute__((noinline)) double write_log(void) { return burn(0.001); }

static void *worker(void *arg) {
  (void)arg;
  double sink = 0, start = thread_cpu_seconds();
  while (thread_cpu_seconds() - start < seconds_arg) {
    sink += parse_request();
    sink += compress_response();
    sink += write_log();
  }
  return (void *)(long)(sink > 0);
}

int main(int argc, char **argv) {
  if (argc > 1)
    seconds_arg = atof(argv[1]);
  int threads = argc > 2 ? atoi(argv[2]) : 2;
  if (threads < 1 || threads > 256)
    threads = 2;
  pthread_t t[256];
  for (int i = 0; i < threads; i++)
    pthread_create(&t[i], NULL, worker, NULL);
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  printf("busy_workers: %d threads x %.1f s of CPU done\n", threads,
         seconds_arg);
  return 0;
}
