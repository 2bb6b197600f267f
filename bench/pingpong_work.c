/* A fixed amount of server-like work, for bench/telemetry.sh: PAIRS pairs of
 * threads, a client and a server handing a byte through two pipes; the
 * server computes WORK_US of CPU per request and blocks in read() between
 * requests, as a database backend blocks between statements. Each server
 * answers REQUESTS requests.
 *
 *   pingpong_work PAIRS REQUESTS WORK_US */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long requests;
static uint64_t work_ns;
static volatile uint64_t sink;

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void serve_request(void) {
  uint64_t end = thread_cpu_ns() + work_ns;
  uint64_t x = sink;
  while (thread_cpu_ns() < end)
    for (int i = 0; i < 200; i++)
      x = x * 6364136223846793005ull + 1442695040888963407ull;
  sink = x;
}

typedef struct pair {
  int to_server[2], to_client[2];
} pair;

static void *server(void *arg) {
  pair *p = arg;
  char c;
  for (long i = 0; i < requests; i++) {
    if (read(p->to_server[0], &c, 1) != 1)
      break;
    serve_request();
    if (write(p->to_client[1], &c, 1) != 1)
      break;
  }
  return NULL;
}

static void *client(void *arg) {
  pair *p = arg;
  char c = 'x';
  for (long i = 0; i < requests; i++)
    if (write(p->to_server[1], &c, 1) != 1 || read(p->to_client[0], &c, 1) != 1)
      break;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: pingpong_work PAIRS REQUESTS WORK_US\n");
    return 2;
  }
  int pairs = atoi(argv[1]);
  requests = atol(argv[2]);
  work_ns = (uint64_t)atol(argv[3]) * 1000;
  pair *p = calloc((size_t)pairs, sizeof *p);
  pthread_t *t = calloc((size_t)pairs * 2, sizeof *t);
  for (int i = 0; i < pairs; i++) {
    if (pipe(p[i].to_server) != 0 || pipe(p[i].to_client) != 0)
      return 1;
    pthread_create(&t[2 * i], NULL, server, &p[i]);
    pthread_create(&t[2 * i + 1], NULL, client, &p[i]);
  }
  for (int i = 0; i < 2 * pairs; i++)
    pthread_join(t[i], NULL);
  printf("pingpong: %d pairs x %ld requests of %s us\n", pairs, requests,
         argv[3]);
  return 0;
}
