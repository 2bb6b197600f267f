/* A small request-handling service that links libcontprof explicitly: it
 * starts the profiler with the API (options override the environment), labels
 * each request with its endpoint, and stops (writing the last profile) before
 * it exits. */
#include <contprof/profiler.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile double sink;

static void spin_cpu_ms(int ms) {
  struct timespec start, now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  double x = 1;
  do {
    for (int i = 0; i < 1000; i++)
      x = x * 1.000001 + 0.25;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000 +
               (now.tv_nsec - start.tv_nsec) / 1000000 <
           ms);
  sink += x;
}

__attribute__((noinline)) static void handle_checkout(void) {
  spin_cpu_ms(6);
  sink += 1;
}
__attribute__((noinline)) static void handle_search(void) {
  spin_cpu_ms(3);
  sink += 1;
}

int main(int argc, char **argv) {
  int requests = argc > 1 ? atoi(argv[1]) : 200;
  contprof_options opts = {.service = "linked-service", .cpu_hz = 100};
  int rc = contprof_start(&opts);
  if (rc != CONTPROF_OK)
    fprintf(stderr, "profiling off: %s\n", contprof_strerror(rc));
  for (int i = 0; i < requests; i++) {
    contprof_label_scope scope;
    if (i % 3 == 0) {
      contprof_label_push("endpoint", "/search", &scope);
      handle_search();
    } else {
      contprof_label_push("endpoint", "/checkout", &scope);
      handle_checkout();
    }
    contprof_label_pop(&scope);
  }
  contprof_stop();
  printf("served %d requests\n", requests);
  return 0;
}
