/* The libcurl client of the HTTP sinks (see http.h). The multi interface
 * drives each request so that cp_http_abort can wake it from another thread
 * and a stop or exit never waits on a server that does not answer.
 *
 * libcurl is loaded with dlopen when the first HTTP sink is made, not linked:
 * it brings some 35 libraries (TLS, Kerberos, LDAP...), and loading them cost
 * every preloaded process, most of which (short-lived children, file
 * output) never upload. */
#include "http.h"

#define CURL_DISABLE_TYPECHECK
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"
#include "contprof/profiler.h"

struct cp_http_client {
  CURLM *multi;
  CURL *easy; /* reused: keeps the connection alive between uploads */
  _Atomic int aborted;
};

/* The libcurl functions used here, resolved from the dlopened library.
 * X(name, return type, parameters) */
#define CURL_FUNCTIONS(X)                                                      \
  X(curl_global_init, CURLcode, (long))                                        \
  X(curl_easy_init, CURL *, (void))                                            \
  X(curl_easy_cleanup, void, (CURL *))                                         \
  X(curl_easy_reset, void, (CURL *))                                           \
  X(curl_easy_setopt, CURLcode, (CURL *, CURLoption, ...))                     \
  X(curl_easy_getinfo, CURLcode, (CURL *, CURLINFO, ...))                      \
  X(curl_easy_strerror, const char *, (CURLcode))                              \
  X(curl_slist_append, struct curl_slist *,                                    \
    (struct curl_slist *, const char *))                                       \
  X(curl_slist_free_all, void, (struct curl_slist *))                          \
  X(curl_mime_init, curl_mime *, (CURL *))                                     \
  X(curl_mime_addpart, curl_mimepart *, (curl_mime *))                         \
  X(curl_mime_name, CURLcode, (curl_mimepart *, const char *))                 \
  X(curl_mime_filename, CURLcode, (curl_mimepart *, const char *))             \
  X(curl_mime_type, CURLcode, (curl_mimepart *, const char *))                 \
  X(curl_mime_data, CURLcode, (curl_mimepart *, const char *, size_t))         \
  X(curl_mime_free, void, (curl_mime *))                                       \
  X(curl_multi_init, CURLM *, (void))                                          \
  X(curl_multi_cleanup, CURLMcode, (CURLM *))                                  \
  X(curl_multi_add_handle, CURLMcode, (CURLM *, CURL *))                       \
  X(curl_multi_remove_handle, CURLMcode, (CURLM *, CURL *))                    \
  X(curl_multi_perform, CURLMcode, (CURLM *, int *))                           \
  X(curl_multi_poll, CURLMcode,                                                \
    (CURLM *, struct curl_waitfd *, unsigned int, int, int *))                 \
  X(curl_multi_wakeup, CURLMcode, (CURLM *))                                   \
  X(curl_multi_info_read, CURLMsg *, (CURLM *, int *))

#define CURL_POINTER(name, ret, params) ret(*fn_##name) params;
static struct { CURL_FUNCTIONS(CURL_POINTER) } curl_api;

/* From here on, calls go through the table. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_global_init curl_api.fn_curl_global_init
#define curl_easy_init curl_api.fn_curl_easy_init
#define curl_easy_cleanup curl_api.fn_curl_easy_cleanup
#define curl_easy_reset curl_api.fn_curl_easy_reset
#define curl_easy_setopt curl_api.fn_curl_easy_setopt
#define curl_easy_getinfo curl_api.fn_curl_easy_getinfo
#define curl_easy_strerror curl_api.fn_curl_easy_strerror
#define curl_slist_append curl_api.fn_curl_slist_append
#define curl_slist_free_all curl_api.fn_curl_slist_free_all
#define curl_mime_init curl_api.fn_curl_mime_init
#define curl_mime_addpart curl_api.fn_curl_mime_addpart
#define curl_mime_name curl_api.fn_curl_mime_name
#define curl_mime_filename curl_api.fn_curl_mime_filename
#define curl_mime_type curl_api.fn_curl_mime_type
#define curl_mime_data curl_api.fn_curl_mime_data
#define curl_mime_free curl_api.fn_curl_mime_free
#define curl_multi_init curl_api.fn_curl_multi_init
#define curl_multi_cleanup curl_api.fn_curl_multi_cleanup
#define curl_multi_add_handle curl_api.fn_curl_multi_add_handle
#define curl_multi_remove_handle curl_api.fn_curl_multi_remove_handle
#define curl_multi_perform curl_api.fn_curl_multi_perform
#define curl_multi_poll curl_api.fn_curl_multi_poll
#define curl_multi_wakeup curl_api.fn_curl_multi_wakeup
#define curl_multi_info_read curl_api.fn_curl_multi_info_read

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ready;

/* Loads libcurl (kept for the life of the process) and resolves the table. */
static int curl_load(void) {
  void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    cp_error("cannot load libcurl.so.4 (%s): profiles are not uploaded",
             dlerror());
    return 0;
  }
#define CURL_RESOLVE(name, ret, params)                                        \
  if (!(*(void **)&curl_api.fn_##name = dlsym(lib, #name))) {                  \
    cp_error("libcurl.so.4 lacks %s: profiles are not uploaded", #name);       \
    return 0;                                                                  \
  }
  CURL_FUNCTIONS(CURL_RESOLVE)
#undef CURL_RESOLVE
  return 1;
}

static void curl_init_once(void) {
  curl_ready = curl_load() && curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

cp_http_client *cp_http_client_create(void) {
  pthread_once(&curl_once, curl_init_once);
  if (!curl_ready)
    return NULL;
  cp_http_client *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->multi = curl_multi_init();
  c->easy = curl_easy_init();
  if (!c->multi || !c->easy) {
    cp_http_client_destroy(c);
    return NULL;
  }
  return c;
}

void cp_http_client_destroy(cp_http_client *c) {
  if (!c)
    return;
  if (c->easy)
    curl_easy_cleanup(c->easy);
  if (c->multi)
    curl_multi_cleanup(c->multi);
  free(c);
}

void cp_http_abort(cp_http_client *c) {
  atomic_store(&c->aborted, 1);
  curl_multi_wakeup(c->multi);
}

/* Printable, one line, bounded: server messages end up in our logs. */
static void clean_message(char *m) {
  for (char *p = m; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
      *p = ' ';
}

typedef struct body_capture {
  char *buf;
  size_t cap, used;
} body_capture;

static size_t on_body(char *data, size_t size, size_t n, void *arg) {
  body_capture *b = arg;
  size_t len = size * n;
  size_t room = b->cap - 1 - b->used;
  size_t take = len < room ? len : room;
  memcpy(b->buf + b->used, data, take);
  b->used += take;
  b->buf[b->used] = 0;
  return len;
}

cp_http_outcome cp_http_post(cp_http_client *c, const cp_http_request *r,
                             cp_http_response *resp) {
  memset(resp, 0, sizeof *resp);
  if (atomic_load(&c->aborted))
    return CP_HTTP_ABORTED;
  long timeout_ms = r->timeout_ms;
  if (r->deadline_ns) {
    uint64_t now = cp_monotonic_ns();
    if (now >= r->deadline_ns) {
      snprintf(resp->message, sizeof resp->message, "deadline passed");
      return CP_HTTP_ABORTED;
    }
    long left = (long)((r->deadline_ns - now) / 1000000u);
    if (left < 1)
      left = 1;
    if (left < timeout_ms)
      timeout_ms = left;
  }
  long connect_ms =
      r->connect_timeout_ms < timeout_ms ? r->connect_timeout_ms : timeout_ms;
  CURL *e = c->easy;
  curl_easy_reset(e);
  char errbuf[CURL_ERROR_SIZE] = "";
  body_capture body = {resp->message, sizeof resp->message, 0};
  struct curl_slist *headers = curl_slist_append(NULL, "Expect:");
  for (size_t i = 0; i < r->nheaders && headers; i++) {
    struct curl_slist *h = curl_slist_append(headers, r->headers[i]);
    if (!h) {
      curl_slist_free_all(headers);
      headers = NULL;
    } else {
      headers = h;
    }
  }
  curl_mime *mime = curl_mime_init(e);
  int ok = headers && mime;
  for (size_t i = 0; ok && i < r->nparts; i++) {
    const cp_http_part *p = &r->parts[i];
    curl_mimepart *part = curl_mime_addpart(mime);
    ok =
        part && curl_mime_name(part, p->name) == CURLE_OK &&
        curl_mime_data(part, (const char *)p->data, p->len) == CURLE_OK &&
        (!p->filename || curl_mime_filename(part, p->filename) == CURLE_OK) &&
        (!p->content_type || curl_mime_type(part, p->content_type) == CURLE_OK);
  }
  if (!ok) {
    curl_mime_free(mime);
    curl_slist_free_all(headers);
    snprintf(resp->message, sizeof resp->message, "out of memory");
    return CP_HTTP_RETRY;
  }
  curl_easy_setopt(e, CURLOPT_URL, r->url);
  if (r->unix_socket)
    curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, r->unix_socket);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(e, CURLOPT_MIMEPOST, mime);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "contprof/" CONTPROF_VERSION_STRING);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
  /* TLS: libcurl verifies the peer and the host name by default; we never
   * turn that off. */

  cp_http_outcome out = CP_HTTP_RETRY;
  CURLcode code = CURLE_OK;
  int done = 0, aborted = 0;
  if (curl_multi_add_handle(c->multi, e) != CURLM_OK) {
    snprintf(resp->message, sizeof resp->message, "curl_multi_add_handle");
    goto cleanup;
  }
  for (;;) {
    int running = 0;
    curl_multi_perform(c->multi, &running);
    int left;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(c->multi, &left)) != NULL)
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == e) {
        code = msg->data.result;
        done = 1;
      }
    if (done || !running)
      break;
    if (atomic_load(&c->aborted) ||
        (r->deadline_ns && cp_monotonic_ns() >= r->deadline_ns)) {
      aborted = 1;
      break;
    }
    int wait_ms = 1000;
    if (r->deadline_ns) {
      uint64_t now = cp_monotonic_ns();
      uint64_t left_ms =
          now < r->deadline_ns ? (r->deadline_ns - now) / 1000000u + 1 : 0;
      if (left_ms < (uint64_t)wait_ms)
        wait_ms = (int)left_ms;
    }
    curl_multi_poll(c->multi, NULL, 0, wait_ms, NULL);
  }
  curl_multi_remove_handle(c->multi, e);
  if (aborted) {
    out = CP_HTTP_ABORTED;
    snprintf(resp->message, sizeof resp->message, "stopped waiting");
  } else if (!done) {
    snprintf(resp->message, sizeof resp->message, "transfer did not finish");
  } else if (code != CURLE_OK) {
    snprintf(resp->message, sizeof resp->message, "%s",
             *errbuf ? errbuf : curl_easy_strerror(code));
    out = (r->deadline_ns && cp_monotonic_ns() >= r->deadline_ns)
              ? CP_HTTP_ABORTED
              : CP_HTTP_RETRY;
  } else {
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &resp->status);
    long s = resp->status;
    if (s >= 200 && s < 300)
      out = CP_HTTP_OK;
    else if (s >= 500 || s == 429 || s == 408 || s == 0)
      out = CP_HTTP_RETRY;
    else
      out = CP_HTTP_REJECTED;
  }
cleanup:
  clean_message(resp->message);
  curl_mime_free(mime);
  curl_slist_free_all(headers);
  /* curl_easy_reset at the next request clears the pointers to the
   * buffers above. */
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, NULL);
  return out;
}

void cp_http_redact_url(const char *url, char *out, size_t len) {
  const char *scheme_end = strstr(url, "://");
  const char *host = scheme_end ? scheme_end + 3 : url;
  const char *path = host + strcspn(host, "/?#");
  const char *at = NULL;
  for (const char *p = host; p < path; p++)
    if (*p == '@')
      at = p;
  size_t q = strcspn(url, "?#");
  if (at && (size_t)(at - url) < q)
    snprintf(out, len, "%.*s%.*s", (int)(host - url), url,
             (int)(url + q - (at + 1)), at + 1);
  else
    snprintf(out, len, "%.*s", (int)q, url);
}

int cp_http_is_insecure_remote(const char *url) {
  if (strncasecmp(url, "http://", 7) != 0)
    return 0;
  const char *host = url + 7;
  const char *end = host + strcspn(host, "/?#");
  for (const char *p = host; p < end; p++)
    if (*p == '@')
      host = p + 1;
  char name[256];
  size_t n;
  if (*host == '[') {
    host++;
    n = strcspn(host, "]");
  } else {
    n = strcspn(host, ":/?#");
  }
  if (n >= sizeof name)
    return 1;
  memcpy(name, host, n);
  name[n] = 0;
  if (strcasecmp(name, "localhost") == 0 || strcmp(name, "::1") == 0 ||
      strncmp(name, "127.", 4) == 0)
    return 0;
  return 1;
}

int cp_base64(const char *data, size_t len, char *out, size_t out_len) {
  static const char tbl[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if ((len + 2) / 3 * 4 + 1 > out_len)
    return -1;
  const unsigned char *in = (const unsigned char *)data;
  size_t o = 0;
  for (size_t i = 0; i < len; i += 3) {
    unsigned v = (unsigned)in[i] << 16;
    if (i + 1 < len)
      v |= (unsigned)in[i + 1] << 8;
    if (i + 2 < len)
      v |= in[i + 2];
    out[o++] = tbl[(v >> 18) & 63];
    out[o++] = tbl[(v >> 12) & 63];
    out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < len ? tbl[v & 63] : '=';
  }
  out[o] = 0;
  return 0;
}

void cp_url_escape(const char *s, char *out, size_t len) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (; *s && o + 4 < len; s++) {
    unsigned char c = (unsigned char)*s;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out[o++] = (char)c;
    } else {
      out[o++] = '%';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    }
  }
  out[o] = 0;
}
