/* A small HTTP/1.1 server for the upload tests, on 127.0.0.1 (ephemeral
 * port) or a unix socket, in threads of the test process. It records every
 * request (method, target, headers, body), answers with the status the test
 * scripted for that request (0: accept and never answer), and parses
 * multipart/form-data bodies. Its helpers are static inline: a test file
 * includes it whole and uses what it needs. */
#ifndef CP_TEST_SERVER_H
#define CP_TEST_SERVER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SRV_MAX_REQS 512
#define SRV_MAX_CONNS 256

typedef struct srv_request {
  char method[16];
  char target[8192];
  char headers[16384]; /* raw header lines */
  uint8_t *body;
  size_t body_len;
  int status; /* what the server answered (0: nothing) */
} srv_request;

typedef struct test_server {
  int fd;
  int port;
  char unix_path[108];
  pthread_t thread;
  _Atomic int stop;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  srv_request *reqs;
  size_t nreqs;
  int conns[SRV_MAX_CONNS];
  pthread_t conn_threads[SRV_MAX_CONNS];
  size_t nconns;
  /* Behaviour: status for request i is script[i] when i < nscript, else
   * default_status. 0 means: never answer. */
  int script[64];
  size_t nscript;
  int default_status;
  char reply_body[256];
  /* Answer with a body announced as 1 GB: reply_body written again and
   * again, every 10 ms, until the client closes the connection. */
  int endless_body;
  int retry_after;    /* seconds: a Retry-After header on 429 and 503 */
  char location[256]; /* a Location header on 3xx, when set */
} test_server;

static inline int srv_read_exact(int fd, uint8_t *buf, size_t len) {
  while (len) {
    ssize_t n = read(fd, buf, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

/* The value of header name (case-insensitive) in raw header lines, into
 * out; 1 when found. */
static inline int srv_header(const char *headers, const char *name, char *out,
                             size_t len) {
  size_t nl = strlen(name);
  for (const char *line = headers; line && *line;) {
    const char *end = strstr(line, "\r\n");
    if (!end)
      end = line + strlen(line);
    if ((size_t)(end - line) > nl && strncasecmp(line, name, nl) == 0 &&
        line[nl] == ':') {
      const char *v = line + nl + 1;
      while (*v == ' ')
        v++;
      snprintf(out, len, "%.*s", (int)(end - v), v);
      return 1;
    }
    line = *end ? end + 2 : NULL;
  }
  return 0;
}

typedef struct srv_conn_arg {
  test_server *s;
  int fd;
} srv_conn_arg;

static inline void *srv_conn_thread(void *arg) {
  srv_conn_arg a = *(srv_conn_arg *)arg;
  free(arg);
  test_server *s = a.s;
  for (;;) {
    /* Head: byte by byte until CRLFCRLF (small, tests only). */
    char head[20000];
    size_t used = 0;
    while (used < sizeof head - 1) {
      ssize_t n = read(a.fd, head + used, 1);
      if (n <= 0)
        return NULL;
      used++;
      if (used >= 4 && memcmp(head + used - 4, "\r\n\r\n", 4) == 0)
        break;
    }
    head[used] = 0;
    srv_request *r = calloc(1, sizeof *r);
    char *line_end = strstr(head, "\r\n");
    *line_end = 0;
    char version[16];
    sscanf(head, "%15s %8191s %15s", r->method, r->target, version);
    snprintf(r->headers, sizeof r->headers, "%s", line_end + 2);
    char cl[32];
    size_t len = srv_header(r->headers, "Content-Length", cl, sizeof cl)
                     ? (size_t)strtoull(cl, NULL, 10)
                     : 0;
    r->body = malloc(len + 1);
    if (srv_read_exact(a.fd, r->body, len) != 0) {
      free(r->body);
      free(r);
      return NULL;
    }
    r->body[len] = 0;
    r->body_len = len;
    pthread_mutex_lock(&s->lock);
    size_t index = s->nreqs;
    int status = index < s->nscript ? s->script[index] : s->default_status;
    r->status = status;
    if (s->nreqs < SRV_MAX_REQS) {
      s->reqs[s->nreqs++] = *r;
    } else {
      free(r->body);
    }
    free(r);
    pthread_cond_broadcast(&s->changed);
    char body[256];
    snprintf(body, sizeof body, "%s", s->reply_body);
    int endless = s->endless_body;
    char extra[320] = "";
    if (s->retry_after && (status == 429 || status == 503))
      snprintf(extra, sizeof extra, "Retry-After: %d\r\n", s->retry_after);
    if (*s->location && status >= 300 && status < 400)
      snprintf(extra, sizeof extra, "Location: %s\r\n", s->location);
    pthread_mutex_unlock(&s->lock);
    if (endless && status) {
      char head[256];
      int hn = snprintf(head, sizeof head,
                        "HTTP/1.1 %d Status\r\nContent-Type: text/plain\r\n"
                        "Content-Length: 1000000000\r\n\r\n",
                        status);
      if (send(a.fd, head, (size_t)hn, MSG_NOSIGNAL) != hn)
        return NULL;
      while (!atomic_load(&s->stop) &&
             send(a.fd, body, strlen(body), MSG_NOSIGNAL) > 0)
        usleep(10000);
      return NULL;
    }
    if (status == 0) {
      /* Accept and never answer, until the server stops. */
      while (!atomic_load(&s->stop)) {
        struct pollfd p = {a.fd, POLLIN, 0};
        if (poll(&p, 1, 50) > 0) {
          char junk[4096];
          if (read(a.fd, junk, sizeof junk) <= 0)
            return NULL;
        }
      }
      return NULL;
    }
    char resp[1024];
    int n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 %d Status\r\nContent-Type: text/plain\r\n"
                     "%sContent-Length: %zu\r\n\r\n%s",
                     status, extra, strlen(body), body);
    if (write(a.fd, resp, (size_t)n) != n)
      return NULL;
  }
}

static inline void *srv_accept_thread(void *arg) {
  test_server *s = arg;
  while (!atomic_load(&s->stop)) {
    struct pollfd p = {s->fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0)
      continue;
    int c = accept(s->fd, NULL, NULL);
    if (c < 0)
      continue;
    pthread_mutex_lock(&s->lock);
    if (s->nconns == SRV_MAX_CONNS) {
      pthread_mutex_unlock(&s->lock);
      close(c);
      continue;
    }
    srv_conn_arg *a = malloc(sizeof *a);
    a->s = s;
    a->fd = c;
    s->conns[s->nconns] = c;
    pthread_create(&s->conn_threads[s->nconns], NULL, srv_conn_thread, a);
    s->nconns++;
    pthread_mutex_unlock(&s->lock);
  }
  return NULL;
}

/* Binds (TCP on 127.0.0.1, or unix_path when non-NULL) without listening:
 * connections are refused until srv_listen. */
static inline test_server *srv_create(const char *unix_path) {
  test_server *s = calloc(1, sizeof *s);
  s->reqs = calloc(SRV_MAX_REQS, sizeof *s->reqs);
  s->default_status = 200;
  snprintf(s->reply_body, sizeof s->reply_body, "ok");
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->changed, NULL);
  if (unix_path) {
    snprintf(s->unix_path, sizeof s->unix_path, "%s", unix_path);
    unlink(unix_path);
    s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", unix_path);
    if (bind(s->fd, (struct sockaddr *)&a, sizeof a) != 0)
      perror("bind unix");
  } else {
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(s->fd, (struct sockaddr *)&a, sizeof a) != 0)
      perror("bind");
    socklen_t len = sizeof a;
    getsockname(s->fd, (struct sockaddr *)&a, &len);
    s->port = ntohs(a.sin_port);
  }
  return s;
}

/* Like srv_create(NULL) but on the IPv4 or IPv6 literal ip (::1, a
 * non-loopback address of this host); NULL when it cannot bind there. */
static inline test_server *srv_create_ip(const char *ip) {
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
  struct sockaddr_in a4 = {.sin_family = AF_INET};
  int v6 = inet_pton(AF_INET6, ip, &a6.sin6_addr) == 1;
  if (!v6 && inet_pton(AF_INET, ip, &a4.sin_addr) != 1)
    return NULL;
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr *sa = v6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4;
  socklen_t len = v6 ? sizeof a6 : sizeof a4;
  if (fd < 0 || bind(fd, sa, len) != 0 || getsockname(fd, sa, &len) != 0) {
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  test_server *s = srv_create(NULL);
  close(s->fd);
  s->fd = fd;
  s->port = ntohs(v6 ? a6.sin6_port : a4.sin_port);
  return s;
}

static inline void srv_listen(test_server *s) {
  listen(s->fd, 64);
  pthread_create(&s->thread, NULL, srv_accept_thread, s);
}

static inline test_server *srv_start(const char *unix_path) {
  test_server *s = srv_create(unix_path);
  srv_listen(s);
  return s;
}

static inline void srv_stop(test_server *s) {
  atomic_store(&s->stop, 1);
  if (s->thread)
    pthread_join(s->thread, NULL);
  pthread_mutex_lock(&s->lock);
  size_t n = s->nconns;
  for (size_t i = 0; i < n; i++)
    shutdown(s->conns[i], SHUT_RDWR);
  pthread_mutex_unlock(&s->lock);
  for (size_t i = 0; i < n; i++) {
    pthread_join(s->conn_threads[i], NULL);
    close(s->conns[i]);
  }
  close(s->fd);
  if (s->unix_path[0])
    unlink(s->unix_path);
  for (size_t i = 0; i < s->nreqs; i++)
    free(s->reqs[i].body);
  free(s->reqs);
  free(s);
}

/* Waits until at least n requests arrived or timeout_ms passed; returns the
 * count. */
static inline size_t srv_wait(test_server *s, size_t n, int timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  pthread_mutex_lock(&s->lock);
  while (s->nreqs < n)
    if (pthread_cond_timedwait(&s->changed, &s->lock, &ts) != 0)
      break;
  size_t got = s->nreqs;
  pthread_mutex_unlock(&s->lock);
  return got;
}

/* ---- multipart ----------------------------------------------------------- */

typedef struct mp_part {
  char name[128], filename[128], content_type[128];
  const uint8_t *data;
  size_t len;
} mp_part;

static inline const uint8_t *mem_find(const uint8_t *h, size_t hl,
                                      const char *n, size_t nl) {
  if (nl > hl)
    return NULL;
  for (size_t i = 0; i + nl <= hl; i++)
    if (memcmp(h + i, n, nl) == 0)
      return h + i;
  return NULL;
}

static inline void mp_param(const char *disp, const char *key, char *out,
                            size_t len) {
  char pat[64];
  snprintf(pat, sizeof pat, "%s=\"", key);
  out[0] = 0;
  const char *p = disp;
  while ((p = strstr(p, pat)) != NULL) {
    if (p == disp || p[-1] == ' ' || p[-1] == ';')
      break;
    p++;
  }
  if (!p)
    return;
  p += strlen(pat);
  const char *e = strchr(p, '"');
  if (e)
    snprintf(out, len, "%.*s", (int)(e - p), p);
}

/* Parses a multipart/form-data body; returns the number of parts, or -1. */
static inline int mp_parse(const srv_request *r, mp_part *parts, int max) {
  char ct[512];
  if (!srv_header(r->headers, "Content-Type", ct, sizeof ct) ||
      strncmp(ct, "multipart/form-data", 19) != 0)
    return -1;
  const char *b = strstr(ct, "boundary=");
  if (!b)
    return -1;
  char delim[300];
  snprintf(delim, sizeof delim, "--%s", b + 9);
  size_t dl = strlen(delim);
  const uint8_t *p = r->body, *end = r->body + r->body_len;
  p = mem_find(p, (size_t)(end - p), delim, dl);
  int n = 0;
  while (p && n < max) {
    p += dl;
    if (end - p >= 2 && p[0] == '-' && p[1] == '-')
      return n; /* closing delimiter */
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
      return -1;
    p += 2;
    const uint8_t *hend = mem_find(p, (size_t)(end - p), "\r\n\r\n", 4);
    if (!hend)
      return -1;
    char hdr[2048];
    snprintf(hdr, sizeof hdr, "%.*s\r\n", (int)(hend - p), (const char *)p);
    const uint8_t *data = hend + 4;
    char crlf_delim[310];
    snprintf(crlf_delim, sizeof crlf_delim, "\r\n%s", delim);
    const uint8_t *next =
        mem_find(data, (size_t)(end - data), crlf_delim, dl + 2);
    if (!next)
      return -1;
    mp_part *mp = &parts[n++];
    memset(mp, 0, sizeof *mp);
    char disp[1024] = "";
    srv_header(hdr, "Content-Disposition", disp, sizeof disp);
    mp_param(disp, "name", mp->name, sizeof mp->name);
    mp_param(disp, "filename", mp->filename, sizeof mp->filename);
    srv_header(hdr, "Content-Type", mp->content_type, sizeof mp->content_type);
    mp->data = data;
    mp->len = (size_t)(next - data);
    p = next + 2;
  }
  return -1;
}

static inline const mp_part *mp_find(const mp_part *parts, int n,
                                     const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(parts[i].name, name) == 0)
      return &parts[i];
  return NULL;
}

#endif
