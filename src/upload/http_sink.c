/* The delivery half of the HTTP sinks (see http_sink.h): a spool, a thread,
 * backoff with jitter, and the exit deadline. */
#include "http_sink.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "http.h"

#define MAX_ITEMS_PER_PROFILE 8

typedef struct http_sink {
  cp_sink base;
  char name[32];
  char url_for_logs[512];
  char *base_url;    /* without the unix:// part */
  char *unix_socket; /* or NULL */
  char **headers;
  size_t nheaders;
  cp_http_build_fn build;
  void *ctx;
  void (*free_ctx)(void *ctx);
  long connect_timeout_ms, timeout_ms;
  uint64_t retry_initial_ns, retry_max_ns;
  pid_t owner;

  cp_http_client *client;
  pthread_t thread;
  int thread_started;
  pthread_mutex_t lock;
  pthread_cond_t wake; /* work queued, finish requested */
  pthread_cond_t idle; /* the thread ended */
  cp_spool *spool;
  uint64_t next_attempt_ns; /* monotonic; 0: now */
  uint64_t backoff_ns;
  int finishing, exited;
  uint64_t deadline_ns;
  /* Reporting: one message per kind of trouble until a delivery succeeds. */
  int failing;
  uint64_t failures;
  long last_rejected_status;
  uint64_t delivered;
  int persistent; /* a spool directory is set */
  uint64_t max_age_ns;
} http_sink;

static uint64_t jitter(uint64_t ns) {
  /* Equal jitter: between half and all of the backoff. */
  unsigned r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
    r = (unsigned)cp_monotonic_ns();
  return ns / 2 + (uint64_t)((double)(ns / 2) * ((double)r / 4294967296.0));
}

static void report_drops(http_sink *s, size_t n) {
  if (!n)
    return;
  cp_warn("%s: spool full: dropped the oldest undelivered request%s (%" PRIu64
          " dropped so far); raise CONTPROF_SPOOL_MAX to keep more",
          s->name, n == 1 ? "" : "s", cp_spool_dropped(s->spool));
}

/* One attempt for the oldest queued request; called and returns with
 * s->lock held. Returns 0 to go on, -1 to stop trying for now. */
static int attempt(http_sink *s) {
  cp_spool_item *it = cp_spool_take(s->spool);
  if (!it)
    return -1;
  if (s->max_age_ns && it->order + s->max_age_ns < cp_realtime_ns()) {
    cp_warn("%s: dropped a profile older than the server accepts (%" PRIu64
            " s)",
            s->name, s->max_age_ns / 1000000000u);
    cp_spool_finish(s->spool, it);
    return 0;
  }
  uint64_t deadline = s->finishing ? s->deadline_ns : 0;
  pthread_mutex_unlock(&s->lock);

  cp_http_part parts[CP_SPOOL_MAX_PARTS];
  for (size_t i = 0; i < it->nparts; i++)
    parts[i] = (cp_http_part){it->parts[i].name, it->parts[i].filename,
                              it->parts[i].content_type, it->parts[i].data,
                              it->parts[i].len};
  cp_http_request req = {
      .base_url = s->base_url,
      .target = it->target,
      .unix_socket = s->unix_socket,
      .headers = (const char *const *)s->headers,
      .nheaders = s->nheaders,
      .parts = parts,
      .nparts = it->nparts,
      .connect_timeout_ms = s->connect_timeout_ms,
      .timeout_ms = s->timeout_ms,
      .deadline_ns = deadline,
  };
  cp_http_response resp;
  it->attempts++;
  cp_http_outcome out = cp_http_post(s->client, &req, &resp);

  pthread_mutex_lock(&s->lock);
  switch (out) {
  case CP_HTTP_OK:
    cp_debug("%s: delivered %s (HTTP %ld)", s->name, it->target, resp.status);
    cp_spool_finish(s->spool, it);
    s->delivered++;
    if (s->failing)
      cp_warn("%s: delivering again after %" PRIu64 " failed attempts", s->name,
              s->failures);
    s->failing = 0;
    s->failures = 0;
    s->last_rejected_status = 0;
    s->backoff_ns = 0;
    s->next_attempt_ns = 0;
    return 0;
  case CP_HTTP_REJECTED:
    if (resp.status != s->last_rejected_status)
      cp_error("%s: %s refused a profile with HTTP %ld: %s; it is dropped "
               "(not retried)",
               s->name, s->url_for_logs, resp.status,
               *resp.message ? resp.message : "(no message)");
    else
      cp_debug("%s: HTTP %ld again; profile dropped", s->name, resp.status);
    s->last_rejected_status = resp.status;
    cp_spool_finish(s->spool, it);
    return 0;
  case CP_HTTP_UNUSABLE:
    /* The URL check refused it (a target that is not a /-path: a planted
     * or damaged spool file), or libcurl cannot be restricted: never sent,
     * never retried. */
    cp_error("%s: a queued profile was not sent: %s; it is dropped", s->name,
             resp.message);
    cp_spool_finish(s->spool, it);
    return 0;
  case CP_HTTP_RETRY:
  case CP_HTTP_ABORTED:
    break;
  }
  s->failures++;
  if (cp_spool_put_back(s->spool, it))
    report_drops(s, 1);
  /* The backend is down: everything queued waits for it, and is written to
   * the spool directory now, not at a clean exit that a kill or a crash
   * would skip. */
  if (s->persistent)
    cp_spool_persist_all(s->spool);
  if (out == CP_HTTP_ABORTED)
    return -1;
  if (!s->failing) {
    s->failing = 1;
    if (resp.status)
      cp_warn("%s: %s answered HTTP %ld: %s; retrying with backoff, "
              "profiles are kept meanwhile",
              s->name, s->url_for_logs, resp.status, resp.message);
    else
      cp_warn("%s: cannot reach %s: %s; retrying with backoff, profiles "
              "are kept meanwhile",
              s->name, s->url_for_logs, resp.message);
  }
  s->backoff_ns = s->backoff_ns ? s->backoff_ns * 2 : s->retry_initial_ns;
  if (s->backoff_ns > s->retry_max_ns)
    s->backoff_ns = s->retry_max_ns;
  uint64_t wait_ns = jitter(s->backoff_ns);
  /* A server that says when to come back (429, 503 with Retry-After in
   * seconds) is not asked sooner, up to an hour. */
  if (resp.retry_after_s > 0) {
    uint64_t asked =
        (uint64_t)(resp.retry_after_s < 3600 ? resp.retry_after_s : 3600) *
        1000000000u;
    if (asked > wait_ns)
      wait_ns = asked;
  }
  s->next_attempt_ns = cp_monotonic_ns() + wait_ns;
  /* At stop, a backend that fails now will not recover in time. */
  return s->finishing ? -1 : 0;
}

static void timespec_at(struct timespec *ts, uint64_t mono_ns) {
  ts->tv_sec = (time_t)(mono_ns / 1000000000u);
  ts->tv_nsec = (long)(mono_ns % 1000000000u);
}

static void *sink_thread(void *arg) {
  http_sink *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    uint64_t now = cp_monotonic_ns();
    if (s->finishing) {
      if (cp_spool_count(s->spool) == 0 || now >= s->deadline_ns)
        break;
      if (attempt(s) != 0)
        break;
      continue;
    }
    if (cp_spool_count(s->spool) > 0 && now >= s->next_attempt_ns) {
      attempt(s);
      continue;
    }
    if (cp_spool_count(s->spool) > 0) {
      struct timespec ts;
      timespec_at(&ts, s->next_attempt_ns);
      pthread_cond_timedwait(&s->wake, &s->lock, &ts);
    } else {
      pthread_cond_wait(&s->wake, &s->lock);
    }
  }
  s->exited = 1;
  pthread_cond_broadcast(&s->idle);
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static int http_send(cp_sink *self, cp_export *e) {
  http_sink *s = (http_sink *)self;
  cp_spool_item *items[MAX_ITEMS_PER_PROFILE];
  int n = s->build(s->ctx, e, items, MAX_ITEMS_PER_PROFILE);
  if (n < 0) {
    cp_error("%s: cannot encode the profile of period %" PRIu64, s->name,
             e->meta.seq);
    return -1;
  }
  pthread_mutex_lock(&s->lock);
  size_t dropped = 0;
  for (int i = 0; i < n; i++)
    dropped += cp_spool_push(s->spool, items[i]);
  report_drops(s, dropped);
  if (s->failing && s->persistent) /* it will wait: on disk at once */
    cp_spool_persist_all(s->spool);
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->lock);
  return 0;
}

#define ADOPTED_GRACE_NS 500000000ull

static void http_finish(cp_sink *self, uint64_t deadline_ns) {
  http_sink *s = (http_sink *)self;
  if (s->owner != getpid())
    return;
  pthread_mutex_lock(&s->lock);
  if (!s->finishing) {
    s->finishing = 1;
    s->deadline_ns = deadline_ns;
    /* Only other processes' requests left (adopted from the spool
     * directory, where they stay) and none delivered yet: a process that
     * had nothing of its own to send (a short-lived child, an exec'd one)
     * does not wait the exit timeout for a backend that does not answer,
     * only ADOPTED_GRACE_NS for the answer to a request in flight. */
    uint64_t now = cp_monotonic_ns();
    if (!s->delivered && !cp_spool_has_own(s->spool) &&
        deadline_ns > now + ADOPTED_GRACE_NS)
      s->deadline_ns = now + ADOPTED_GRACE_NS;
  }
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->lock);
}

static void free_sink(http_sink *s) {
  for (size_t i = 0; i < s->nheaders; i++) {
    /* Headers may carry secrets: do not leave them in freed memory. */
    explicit_bzero(s->headers[i], strlen(s->headers[i]));
    free(s->headers[i]);
  }
  free(s->headers);
  if (s->free_ctx)
    s->free_ctx(s->ctx);
  cp_spool_destroy(s->spool);
  cp_http_client_destroy(s->client);
  free(s->base_url);
  free(s->unix_socket);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->wake);
  pthread_cond_destroy(&s->idle);
  free(s);
}

/* The least time a sink's thread is given to end once aborted, when the
 * exit deadline is nearer (docs/configuration.md, CONTPROF_EXIT_TIMEOUT).
 * An abort ends a transfer at once; the bound only matters for a thread
 * stuck where the abort does not reach (a name resolution libcurl waits
 * for, a slow disk). */
#define JOIN_GRACE_NS 100000000u

/* What became of `left` undelivered requests, `lost` of them in memory
 * only: said as it is. */
static void kept_or_lost(const http_sink *s, size_t left, size_t lost,
                         char *out, size_t len) {
  if (!s->persistent)
    snprintf(out, len, "lost (set CONTPROF_SPOOL_DIR to keep them)");
  else if (lost == 0)
    snprintf(out, len, "kept in CONTPROF_SPOOL_DIR for the next start");
  else if (lost >= left)
    snprintf(out, len, "lost: CONTPROF_SPOOL_DIR could not take them");
  else
    snprintf(out, len,
             "%zu kept in CONTPROF_SPOOL_DIR for the next start, %zu lost: "
             "it could not take them",
             left - lost, lost);
}

/* Joins the sink's thread by the exit deadline (at least JOIN_GRACE_NS after
 * the abort). Returns 1 when joined; 0 when the thread is still running: it
 * is detached and its sink left allocated (it still uses it), what is queued
 * is written to the spool directory if the lock can be had, and one message
 * says what was lost. The application's exit is not held longer. */
static int join_bounded(http_sink *s) {
  uint64_t now = cp_monotonic_ns();
  uint64_t limit = s->deadline_ns > now + JOIN_GRACE_NS ? s->deadline_ns
                                                        : now + JOIN_GRACE_NS;
  /* pthread_timedjoin_np takes CLOCK_REALTIME; the deadline is monotonic. */
  uint64_t at = cp_realtime_ns() + (limit - now);
  struct timespec ts = {(time_t)(at / 1000000000u), (long)(at % 1000000000u)};
  int rc = pthread_timedjoin_np(s->thread, NULL, &ts);
  if (rc == 0)
    return 1;
  pthread_detach(s->thread);
  size_t left = 1; /* the request in flight */
  uint64_t lock_at = cp_realtime_ns() + JOIN_GRACE_NS / 2;
  struct timespec lts = {(time_t)(lock_at / 1000000000u),
                         (long)(lock_at % 1000000000u)};
  size_t lost = left;
  if (pthread_mutex_timedlock(&s->lock, &lts) == 0) {
    left += cp_spool_count(s->spool);
    /* The one in flight was written when it first failed, if it did. */
    lost = s->persistent ? cp_spool_persist_all(s->spool) : left;
    pthread_mutex_unlock(&s->lock);
  }
  char what[160];
  kept_or_lost(s, left, lost, what, sizeof what);
  cp_warn("%s: its upload thread did not stop by the exit deadline "
          "(CONTPROF_EXIT_TIMEOUT); not waiting for it: %zu request%s %s",
          s->name, left, left == 1 ? "" : "s", what);
  return 0;
}

static void http_destroy(cp_sink *self) {
  http_sink *s = (http_sink *)self;
  if (s->owner != getpid())
    return; /* the child of fork: the thread is gone, its lock may be held;
               the memory is the parent's copy, left as is */
  if (!s->thread_started) {
    free_sink(s);
    return;
  }
  /* Without an explicit finish: stop now. */
  http_finish(self, cp_monotonic_ns());
  pthread_mutex_lock(&s->lock);
  /* Keep a little time to write what is left to the spool directory. */
  uint64_t now = cp_monotonic_ns();
  uint64_t window = s->deadline_ns > now ? s->deadline_ns - now : 0;
  uint64_t margin = window / 20 < 100000000u ? window / 20 : 100000000u;
  struct timespec ts;
  timespec_at(&ts, s->deadline_ns - margin);
  while (!s->exited) {
    if (pthread_cond_timedwait(&s->idle, &s->lock, &ts) != 0 &&
        cp_monotonic_ns() >= s->deadline_ns - margin)
      break;
  }
  if (!s->exited)
    cp_http_abort(s->client);
  pthread_mutex_unlock(&s->lock);
  if (!join_bounded(s))
    return;
  size_t left = cp_spool_count(s->spool);
  size_t lost = cp_spool_persist_all(s->spool);
  if (left) {
    char what[160];
    kept_or_lost(s, left, lost, what, sizeof what);
    cp_warn("%s: %zu request%s not delivered by the exit deadline "
            "(CONTPROF_EXIT_TIMEOUT): %s",
            s->name, left, left == 1 ? "" : "s", what);
  }
  free_sink(s);
}

cp_sink *cp_http_sink_create(const cp_config *cfg,
                             const cp_http_sink_spec *spec) {
  /* The URL rules of docs/security.md ("Backends: URLs and credentials"),
   * with libcurl's own parser: what it would connect to is what is
   * checked. */
  char redacted[512];
  cp_url_info info;
  cp_url_kind kind = cp_http_check_url(spec->base_url, &info);
  if (kind == CP_URL_INVALID) {
    cp_http_redact_url(spec->base_url, redacted, sizeof redacted);
    cp_error("%s: cannot upload to '%s': %s; %s upload disabled", spec->name,
             redacted, info.why, spec->name);
    if (spec->free_ctx)
      spec->free_ctx(spec->ctx);
    return NULL;
  }
  snprintf(redacted, sizeof redacted, "%s", info.shown);
  if ((spec->has_secret || info.has_userinfo) &&
      !cp_http_credentials_allowed(kind)) {
    cp_error("%s: refusing to send credentials over plain http to %s; use "
             "https (or a literal loopback address: 127.0.0.0/8, [::1], "
             "localhost); %s upload disabled",
             spec->name, redacted, spec->name);
    if (spec->free_ctx)
      spec->free_ctx(spec->ctx);
    return NULL;
  }
  http_sink *s = calloc(1, sizeof *s);
  if (!s) {
    if (spec->free_ctx)
      spec->free_ctx(spec->ctx);
    return NULL;
  }
  snprintf(s->name, sizeof s->name, "%s", spec->name);
  snprintf(s->url_for_logs, sizeof s->url_for_logs, "%s", redacted);
  s->build = spec->build;
  s->ctx = spec->ctx;
  s->free_ctx = spec->free_ctx;
  s->owner = getpid();
  s->persistent = cfg->spool_dir != NULL;
  s->max_age_ns = spec->max_age_ns;
  s->connect_timeout_ms = cfg->connect_timeout_ms;
  s->timeout_ms = cfg->upload_timeout_ms;
  s->retry_initial_ns = (uint64_t)cfg->retry_initial_ms * 1000000u;
  s->retry_max_ns = (uint64_t)cfg->retry_max_ms * 1000000u;
  pthread_mutex_init(&s->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&s->wake, &attr);
  pthread_cond_init(&s->idle, &attr);
  pthread_condattr_destroy(&attr);
  if (strncmp(spec->base_url, "unix://", 7) == 0) {
    s->unix_socket = strdup(spec->base_url + 7);
    s->base_url = strdup("http://localhost");
  } else {
    s->base_url = strdup(spec->base_url);
  }
  s->headers = calloc(spec->nheaders + 1, sizeof *s->headers);
  int ok = s->base_url && s->headers &&
           (strncmp(spec->base_url, "unix://", 7) != 0 || s->unix_socket);
  for (size_t i = 0; ok && i < spec->nheaders; i++) {
    if (!(s->headers[i] = strdup(spec->headers[i])))
      ok = 0;
    else
      s->nheaders++;
  }
  if (ok)
    s->client = cp_http_client_create();
  if (ok && s->client)
    s->spool = cp_spool_create(cfg->spool_dir, spec->name,
                               cfg->spool_max_profiles, cfg->spool_max_bytes);
  if (!ok || !s->client || !s->spool) {
    cp_error("%s: cannot set up the uploads (out of memory or libcurl "
             "failed to initialise)",
             spec->name);
    free_sink(s);
    return NULL;
  }
  char tname[16];
  snprintf(tname, sizeof tname, "contprof-%.6s", spec->name);
  int rc = cp_start_internal_thread(&s->thread, sink_thread, s, tname);
  if (rc != 0) {
    cp_error("%s: cannot start its thread: %s", spec->name, strerror(rc));
    free_sink(s);
    return NULL;
  }
  s->thread_started = 1;
  s->base.name = s->name;
  s->base.send = http_send;
  s->base.finish = http_finish;
  s->base.destroy = http_destroy;
  cp_info("%s: uploading to %s", s->name, redacted);
  return &s->base;
}
