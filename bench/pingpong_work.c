/* A fixed amount of server-like work, for bench/telemetry.sh: PAIRS pairs of
 * threads, a client and a server handing a byte through two pipes; the
 * server computes WORK_US of CPU per request and blocks between requests,
 * as a database backend blocks between statements: in read() (WAIT "read",
 * the default), or in poll() before each read as an event loop does (WAIT
 * "poll"), or, with WAIT "cond", a thread pool's worker: the requests and
 * answers are flags under a mutex, waited for with pthread_cond_wait. Each
 * client waits GAP_US (default 0) between an answer and its next request, in
 * nanosleep, as a client thinks or a connection idles: with a gap the server
 * blocks most of the time, as database backends do under pgbench. Each server
 * answers REQUESTS requests.
 *
 *   pingpong_work PAIRS REQUESTS WORK_US [read|poll|cond [GAP_US]] */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  /* WAIT "cond": */
  pthread_mutex_t mu;
  pthread_cond_t to_server_cv, to_client_cv;
  int request, answer;
} pair;

static int use_poll, use_cond;

/* WAIT "cond": waits for *flag under p->mu, then clears it. */
static void cond_take(pair *p, pthread_cond_t *cv, int *flag) {
  pthread_mutex_lock(&p->mu);
  while (!*flag)
    pthread_cond_wait(cv, &p->mu);
  *flag = 0;
  pthread_mutex_unlock(&p->mu);
}

static void cond_give(pair *p, pthread_cond_t *cv, int *flag) {
  pthread_mutex_lock(&p->mu);
  *flag = 1;
  pthread_cond_signal(cv);
  pthread_mutex_unlock(&p->mu);
}

/* The server's wait for the next request. */
__attribute__((noinline)) static ssize_t next_request(int fd, char *c) {
  if (use_poll) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, -1) != 1)
      return -1;
  }
  return read(fd, c, 1);
}

/* WAIT "cond": the worker's wait for the next request. */
__attribute__((noinline)) static void next_job(pair *p) {
  cond_take(p, &p->to_server_cv, &p->request);
}

static void *server(void *arg) {
  pair *p = arg;
  char c;
  for (long i = 0; i < requests; i++) {
    if (use_cond) {
      next_job(p);
      serve_request();
      cond_give(p, &p->to_client_cv, &p->answer);
      continue;
    }
    if (next_request(p->to_server[0], &c) != 1)
      break;
    serve_request();
    if (write(p->to_client[1], &c, 1) != 1)
      break;
  }
  return NULL;
}

static long gap_us;

static void *client(void *arg) {
  pair *p = arg;
  char c = 'x';
  struct timespec gap = {0, gap_us * 1000};
  for (long i = 0; i < requests; i++) {
    if (use_cond) {
      cond_give(p, &p->to_server_cv, &p->request);
      cond_take(p, &p->to_client_cv, &p->answer);
    } else if (write(p->to_server[1], &c, 1) != 1 ||
               read(p->to_client[0], &c, 1) != 1)
      break;
    if (gap_us)
      nanosleep(&gap, NULL);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4 || argc > 6 ||
      (argc >= 5 && strcmp(argv[4], "read") != 0 &&
       strcmp(argv[4], "poll") != 0 && strcmp(argv[4], "cond") != 0)) {
    fprintf(stderr, "usage: pingpong_work PAIRS REQUESTS WORK_US "
                    "[read|poll|cond [GAP_US]]\n");
    return 2;
  }
  const char *wait = argc >= 5 ? argv[4] : "read";
  use_poll = strcmp(wait, "poll") == 0;
  use_cond = strcmp(wait, "cond") == 0;
  gap_us = argc == 6 ? atol(argv[5]) : 0;
  if (gap_us < 0 || gap_us >= 1000000) {
    fprintf(stderr, "pingpong_work: GAP_US is 0..999999\n");
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
    pthread_mutex_init(&p[i].mu, NULL);
    pthread_cond_init(&p[i].to_server_cv, NULL);
    pthread_cond_init(&p[i].to_client_cv, NULL);
    pthread_create(&t[2 * i], NULL, server, &p[i]);
    pthread_create(&t[2 * i + 1], NULL, client, &p[i]);
  }
  for (int i = 0; i < 2 * pairs; i++)
    pthread_join(t[i], NULL);
  printf("pingpong: %d pairs x %ld requests of %s us, waiting in %s, %ld us "
         "between requests\n",
         pairs, requests, argv[3], wait, gap_us);
  return 0;
}
