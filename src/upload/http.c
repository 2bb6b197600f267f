/* The libcurl client of the HTTP sinks (see http.h). The multi interface
 * drives each request so that cp_http_abort can wake it from another thread
 * and a stop or exit never waits on a server that does not answer.
 *
 * libcurl is loaded with dlopen when the first HTTP sink is made, not linked:
 * it brings some 35 libraries (TLS, Kerberos, LDAP...), and loading them cost
 * every preloaded process, most of which (short-lived children, file
 * output) never upload.
 *
 * No descriptor outlives a request: the easy and multi handles (the
 * connection, the multi handle's wakeup pair, the resolver's) are made for
 * each attempt and closed before cp_http_post returns. An application that
 * closes descriptors it does not know of (3..63 before exec-ing, a daemon
 * closing all) then never has libcurl close, read or write one of its own
 * files later; the cost is a new connection per upload (docs/security.md,
 * "Descriptors shared with the application"). */
#include "http.h"

#define CURL_DISABLE_TYPECHECK
#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"
#include "contprof/profiler.h"
#include "fork_guard.h"

struct cp_http_client {
  pthread_mutex_t lock; /* guards multi against cp_http_abort */
  CURLM *multi;         /* of the request in flight, else NULL */
  _Atomic int aborted;
};

/* The libcurl functions used here, resolved from the dlopened library.
 * X(name, return type, parameters) */
#define CURL_FUNCTIONS(X)                                                      \
  X(curl_global_init, CURLcode, (long))                                        \
  X(curl_easy_init, CURL *, (void))                                            \
  X(curl_easy_cleanup, void, (CURL *))                                         \
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
  X(curl_multi_info_read, CURLMsg *, (CURLM *, int *))                         \
  X(curl_url, CURLU *, (void))                                                 \
  X(curl_url_cleanup, void, (CURLU *))                                         \
  X(curl_url_dup, CURLU *, (CURLU *))                                          \
  X(curl_url_set, CURLUcode, (CURLU *, CURLUPart, const char *, unsigned int)) \
  X(curl_url_get, CURLUcode, (CURLU *, CURLUPart, char **, unsigned int))      \
  X(curl_free, void, (void *))

#define CURL_POINTER(name, ret, params) ret(*fn_##name) params;
static struct { CURL_FUNCTIONS(CURL_POINTER) } curl_api;

/* From here on, calls go through the table. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_global_init curl_api.fn_curl_global_init
#define curl_easy_init curl_api.fn_curl_easy_init
#define curl_easy_cleanup curl_api.fn_curl_easy_cleanup
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
#define curl_url curl_api.fn_curl_url
#define curl_url_cleanup curl_api.fn_curl_url_cleanup
#define curl_url_dup curl_api.fn_curl_url_dup
#define curl_url_set curl_api.fn_curl_url_set
#define curl_url_get curl_api.fn_curl_url_get
#define curl_free curl_api.fn_curl_free

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

int cp_http_init(void) {
  cp_fork_guard_enter(); /* loading and initialising: see cp_http_post */
  pthread_once(&curl_once, curl_init_once);
  cp_fork_guard_exit();
  return curl_ready ? 0 : -1;
}

/* Restricts e to http and https; 0, or -1 when this libcurl cannot (then no
 * request may be made: a redirect-free but otherwise any-protocol transfer
 * is not what we promise). CURLOPT_PROTOCOLS_STR came in 7.85; older ones
 * only know the bitmask. */
static int restrict_protocols(CURL *e) {
  CURLcode rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  if (rc == CURLE_OK)
    return 0;
  if (rc != CURLE_UNKNOWN_OPTION)
    return -1;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS,
                        (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#pragma GCC diagnostic pop
  return rc == CURLE_OK ? 0 : -1;
}

cp_http_client *cp_http_client_create(void) {
  if (cp_http_init() != 0)
    return NULL;
  /* Find out once, with a handle that makes no connection, whether this
   * libcurl can be restricted to http and https. */
  CURL *probe = curl_easy_init();
  int restricted = probe && restrict_protocols(probe) == 0;
  if (probe)
    curl_easy_cleanup(probe);
  if (!restricted) {
    cp_error("libcurl cannot restrict uploads to http and https "
             "(CURLOPT_PROTOCOLS_STR): profiles are not uploaded");
    return NULL;
  }
  cp_http_client *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  pthread_mutex_init(&c->lock, NULL);
  return c;
}

void cp_http_client_destroy(cp_http_client *c) {
  if (!c)
    return;
  pthread_mutex_destroy(&c->lock);
  free(c);
}

void cp_http_abort(cp_http_client *c) {
  pthread_mutex_lock(&c->lock);
  atomic_store(&c->aborted, 1);
  /* The multi handle exists only while a request is in flight; the lock
   * keeps cp_http_post from closing it under this call. */
  if (c->multi)
    curl_multi_wakeup(c->multi);
  pthread_mutex_unlock(&c->lock);
}

/* ---- URLs ------------------------------------------------------------- */

int cp_http_host_is_loopback(const char *host) {
  if (!host)
    return 0;
  if (strcasecmp(host, "localhost") == 0)
    return 1;
  char buf[64];
  size_t n = strlen(host);
  if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
    host++;
    n -= 2;
  }
  if (n >= sizeof buf)
    return 0;
  memcpy(buf, host, n);
  buf[n] = 0;
  /* inet_pton takes only the plain forms (four decimal parts for IPv4):
   * a name that starts like an address is a name, resolved by DNS. */
  struct in_addr a4;
  if (inet_pton(AF_INET, buf, &a4) == 1)
    return (ntohl(a4.s_addr) >> 24) == 127;
  struct in6_addr a6;
  if (inet_pton(AF_INET6, buf, &a6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&a6);
  return 0;
}

/* The length of what reads as a scheme at url's start (a letter, then
 * letters, digits, '+', '-', '.'), 0 when none. */
static size_t scheme_len(const char *url) {
  size_t i = 0;
  if (!isalpha((unsigned char)url[0]))
    return 0;
  while (isalnum((unsigned char)url[i]) || url[i] == '+' || url[i] == '-' ||
         url[i] == '.')
    i++;
  return i;
}

/* A scheme as libcurl recognises one before "://"; without it libcurl's
 * easy interface guesses plain http. */
static int has_scheme(const char *url) {
  size_t i = scheme_len(url);
  return i && strncmp(url + i, "://", 3) == 0;
}

/* "http:/host", "https:host", "user:pw@host": a scheme (or what reads as
 * one) and a colon not followed by "//" nor by a port number. libcurl would
 * be handed "http://" in front of it: a host named "http" and the rest,
 * credentials included, as its path, sent in the clear. */
static int has_bare_scheme(const char *url) {
  size_t i = scheme_len(url);
  return i && url[i] == ':' && strncmp(url + i, "://", 3) != 0 &&
         !isdigit((unsigned char)url[i + 1]);
}

static void set_why(char *why, size_t len, const char *text) {
  if (why && len)
    snprintf(why, len, "%s", text);
}

/* Parses an http or https URL (no scheme: http) into a new handle; NULL with
 * why set otherwise. libcurl must be loaded. */
static CURLU *parse_http(const char *url, int *https, char *why, size_t len) {
  CURLU *u = curl_url();
  if (!u) {
    set_why(why, len, "out of memory");
    return NULL;
  }
  CURLUcode rc;
  if (has_bare_scheme(url)) {
    set_why(why, len,
            "not a URL: a scheme must be followed by // (http://host:port)");
    curl_url_cleanup(u);
    return NULL;
  }
  if (has_scheme(url)) {
    rc = curl_url_set(u, CURLUPART_URL, url, 0);
  } else {
    size_t n = strlen(url) + 8;
    char *full = malloc(n);
    if (!full) {
      curl_url_cleanup(u);
      set_why(why, len, "out of memory");
      return NULL;
    }
    snprintf(full, n, "http://%s", url);
    rc = curl_url_set(u, CURLUPART_URL, full, 0);
    free(full);
  }
  char *scheme = NULL, *host = NULL;
  if (rc == CURLUE_UNSUPPORTED_SCHEME) {
    set_why(why, len, "the scheme must be http://, https:// or unix://");
  } else if (rc != CURLUE_OK ||
             curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
             curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host) {
    set_why(why, len, "not a URL libcurl can parse, or no host");
  } else if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) {
    set_why(why, len, "the scheme must be http://, https:// or unix://");
  } else {
    *https = strcmp(scheme, "https") == 0;
    curl_free(scheme);
    curl_free(host);
    return u;
  }
  curl_free(scheme);
  curl_free(host);
  curl_url_cleanup(u);
  return NULL;
}

cp_url_kind cp_http_check_url(const char *url, cp_url_info *info) {
  cp_url_info scratch;
  if (!info)
    info = &scratch;
  memset(info, 0, sizeof *info);
  if (!url || !*url) {
    set_why(info->why, sizeof info->why, "empty");
    return CP_URL_INVALID;
  }
  if (strncmp(url, "unix://", 7) == 0) {
    if (url[7] != '/') {
      set_why(info->why, sizeof info->why,
              "unix:// needs an absolute socket path (unix:///path)");
      return CP_URL_INVALID;
    }
    snprintf(info->shown, sizeof info->shown, "%s", url);
    return CP_URL_UNIX;
  }
  if (cp_http_init() != 0) {
    set_why(info->why, sizeof info->why, "libcurl cannot be loaded");
    return CP_URL_INVALID;
  }
  int https = 0;
  CURLU *u = parse_http(url, &https, info->why, sizeof info->why);
  if (!u)
    return CP_URL_INVALID;
  char *host = NULL, *port = NULL, *path = NULL, *user = NULL, *pass = NULL;
  curl_url_get(u, CURLUPART_HOST, &host, 0);
  curl_url_get(u, CURLUPART_PORT, &port, 0);
  curl_url_get(u, CURLUPART_PATH, &path, 0);
  info->has_userinfo =
      curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
      curl_url_get(u, CURLUPART_PASSWORD, &pass, 0) == CURLUE_OK;
  cp_url_kind kind = https                            ? CP_URL_HTTPS
                     : cp_http_host_is_loopback(host) ? CP_URL_HTTP_LOOPBACK
                                                      : CP_URL_HTTP_REMOTE;
  snprintf(info->shown, sizeof info->shown, "%s://%s%s%s%s",
           https ? "https" : "http", host ? host : "", port ? ":" : "",
           port ? port : "", path && strcmp(path, "/") != 0 ? path : "");
  if (user)
    explicit_bzero(user, strlen(user));
  if (pass)
    explicit_bzero(pass, strlen(pass));
  curl_free(host);
  curl_free(port);
  curl_free(path);
  curl_free(user);
  curl_free(pass);
  curl_url_cleanup(u);
  return kind;
}

int cp_http_credentials_allowed(cp_url_kind kind) {
  return kind == CP_URL_HTTPS || kind == CP_URL_HTTP_LOOPBACK ||
         kind == CP_URL_UNIX;
}

int cp_http_is_insecure_remote(const char *url) {
  return !cp_http_credentials_allowed(cp_http_check_url(url, NULL));
}

/* "" or '/' then printable ASCII without '#' or space: what our sinks make.
 * Anything else (a spool file's "@host/x", ".evil.com/x") is refused, not
 * repaired. */
static int target_ok(const char *target) {
  if (*target && *target != '/')
    return 0;
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)target; *p; p++, n++)
    if (*p <= 0x20 || *p >= 0x7f || *p == '#' || n >= 8192)
      return 0;
  return 1;
}

/* 1 when part what of a and b is the same (both absent counts). */
static int same_part(CURLU *a, CURLU *b, CURLUPart what) {
  char *x = NULL, *y = NULL;
  CURLUcode rx = curl_url_get(a, what, &x, 0);
  CURLUcode ry = curl_url_get(b, what, &y, 0);
  int same = rx == ry && (rx != CURLUE_OK || strcmp(x, y) == 0);
  if (x)
    explicit_bzero(x, strlen(x)); /* user info */
  if (y)
    explicit_bzero(y, strlen(y));
  curl_free(x);
  curl_free(y);
  return same;
}

/* The request URL of base and target as a handle (see cp_http_compose_url);
 * NULL with why set. The URL is written out and parsed again whole (setting
 * the path part alone would re-case the target's %-escapes), then its
 * scheme, user info, host and port must be the base's: whatever a target
 * holds, it cannot send the request elsewhere. */
static CURLU *compose(const char *base, const char *target, char *why,
                      size_t len) {
  if (!target_ok(target)) {
    set_why(why, len, "the request path is not a /-path; not sent");
    return NULL;
  }
  int https;
  CURLU *u = parse_http(base, &https, why, len);
  if (!u)
    return NULL;
  char *bpath = NULL, *bquery = NULL, *origin = NULL;
  curl_url_get(u, CURLUPART_PATH, &bpath, 0);
  curl_url_get(u, CURLUPART_QUERY, &bquery, 0);
  CURLU *o = curl_url_dup(u);
  /* scheme://[user info@]host[:port]/ of the base. */
  int ok = o && curl_url_set(o, CURLUPART_PATH, "/", 0) == CURLUE_OK &&
           curl_url_set(o, CURLUPART_QUERY, NULL, 0) == CURLUE_OK &&
           curl_url_set(o, CURLUPART_FRAGMENT, NULL, 0) == CURLUE_OK &&
           curl_url_get(o, CURLUPART_URL, &origin, 0) == CURLUE_OK;
  curl_url_cleanup(o);
  const char *q = strchr(target, '?');
  size_t tpath_len = q ? (size_t)(q - target) : strlen(target);
  size_t blen = bpath ? strlen(bpath) : 0;
  while (blen > 0 && bpath[blen - 1] == '/')
    blen--;
  size_t olen = origin ? strlen(origin) : 0;
  if (olen > 0 && origin[olen - 1] == '/')
    olen--;
  size_t flen =
      olen + blen + strlen(target) + (bquery ? strlen(bquery) : 0) + 4;
  char *full = ok ? malloc(flen) : NULL;
  CURLU *v = NULL;
  if (full) {
    const char *tq = q ? q + 1 : NULL;
    int n = snprintf(full, flen, "%.*s%.*s%.*s", (int)olen, origin, (int)blen,
                     bpath, (int)tpath_len, target);
    if (!blen && !tpath_len)
      n += snprintf(full + n, flen - (size_t)n, "/");
    if (bquery || tq)
      snprintf(full + n, flen - (size_t)n, "?%s%s%s", bquery ? bquery : "",
               bquery && tq ? "&" : "", tq ? tq : "");
    v = curl_url();
    ok = v && curl_url_set(v, CURLUPART_URL, full, 0) == CURLUE_OK &&
         same_part(u, v, CURLUPART_SCHEME) && same_part(u, v, CURLUPART_USER) &&
         same_part(u, v, CURLUPART_PASSWORD) &&
         same_part(u, v, CURLUPART_HOST) && same_part(u, v, CURLUPART_PORT) &&
         same_part(u, v, CURLUPART_ZONEID);
    explicit_bzero(full, strlen(full));
    free(full);
  } else {
    ok = 0;
  }
  if (origin)
    explicit_bzero(origin, strlen(origin));
  curl_free(origin);
  curl_free(bpath);
  curl_free(bquery);
  curl_url_cleanup(u);
  if (!ok) {
    set_why(why, len, "cannot build the request URL");
    curl_url_cleanup(v);
    return NULL;
  }
  return v;
}

int cp_http_compose_url(const char *base, const char *target, char *out,
                        size_t len, char *why, size_t why_len) {
  if (cp_http_init() != 0) {
    set_why(why, why_len, "libcurl cannot be loaded");
    return -1;
  }
  CURLU *u = compose(base, target, why, why_len);
  if (!u)
    return -1;
  char *url = NULL;
  int rc = -1;
  if (curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK)
    set_why(why, why_len, "cannot build the request URL");
  else if (strlen(url) >= len)
    set_why(why, why_len, "the request URL is too long");
  else {
    memcpy(out, url, strlen(url) + 1);
    rc = 0;
  }
  if (url)
    explicit_bzero(url, strlen(url)); /* may hold user info */
  curl_free(url);
  curl_url_cleanup(u);
  return rc;
}

/* ---- requests ----------------------------------------------------------- */

/* Printable, one line, bounded: server messages end up in our logs. */
static void clean_message(char *m) {
  for (char *p = m; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
      *p = ' ';
}

/* Every word of the request's header values that could be a secret (the
 * API key, a token, basic auth's base64), where the server echoes it in the
 * body we show: replaced by "***", and so is a beginning of one that the
 * message's end cut. */
static void redact_secrets(char *msg, const char *const *headers,
                           size_t nheaders) {
  for (size_t h = 0; h < nheaders; h++) {
    const char *v = strchr(headers[h], ':');
    while (v && *v) {
      v += strspn(v, ": \t");
      size_t wlen = strcspn(v, " \t");
      if (wlen >= 8) { /* not "Bearer", "Basic" */
        for (size_t i = 0; msg[i]; i++) {
          size_t m = 0;
          while (m < wlen && msg[i + m] && msg[i + m] == v[m])
            m++;
          if (m == wlen || (!msg[i + m] && m >= 4)) {
            memmove(msg + i + 3, msg + i + m, strlen(msg + i + m) + 1);
            memcpy(msg + i, "***", 3);
            i += 2;
          }
        }
      }
      v += wlen;
    }
  }
}

/* Retry-After: a number of seconds (the HTTP-date form is not read: 0). */
static size_t on_header(char *data, size_t size, size_t n, void *arg) {
  long *retry_after = arg;
  size_t len = size * n;
  static const char name[] = "retry-after:";
  if (len > sizeof name - 1 && strncasecmp(data, name, sizeof name - 1) == 0) {
    long v = 0;
    size_t i = sizeof name - 1;
    while (i < len && (data[i] == ' ' || data[i] == '\t'))
      i++;
    size_t digits = 0;
    for (; i < len && isdigit((unsigned char)data[i]) && v < 1000000; i++)
      v = v * 10 + (data[i] - '0'), digits++;
    *retry_after = digits ? v : 0;
  }
  return len;
}

typedef struct body_capture {
  char *buf;
  size_t cap, used;
  int full; /* the rest was not read */
} body_capture;

/* Keeps the start of the body and stops the transfer there: what the
 * server says is in its status; reading a huge or slow body to its end
 * turned a 200 into a timeout. */
static size_t on_body(char *data, size_t size, size_t n, void *arg) {
  body_capture *b = arg;
  size_t len = size * n;
  size_t room = b->cap - 1 - b->used;
  size_t take = len < room ? len : room;
  memcpy(b->buf + b->used, data, take);
  b->used += take;
  b->buf[b->used] = 0;
  if (take < len)
    b->full = 1;
  return take; /* less than len: libcurl ends the transfer */
}

/* A 3xx: the profile was not taken, and the server says it belongs
 * elsewhere. Redirects are not followed: the request carries the backend's
 * credentials, and a redirect may point at any host. Nor is the profile
 * dropped: the URL is a setting that the user corrects, and the next process
 * started with it delivers what this one spooled. So it is kept and tried
 * again with the backoff, and the message says where the server pointed
 * (without credentials or query) in place of the body. */
static cp_http_outcome redirected(CURL *e, cp_http_response *resp) {
  const char *to = NULL;
  char shown[160] = "";
  if (curl_easy_getinfo(e, CURLINFO_REDIRECT_URL, &to) == CURLE_OK && to)
    cp_http_redact_url(to, shown, sizeof shown);
  snprintf(resp->message, sizeof resp->message,
           "%s%s; redirects are not followed: set the URL to where the "
           "backend is",
           *shown ? "redirected to " : "a redirect", shown);
  return CP_HTTP_RETRY;
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
  /* libcurl, OpenSSL and the C library take locks of their own (OpenSSL's
   * random generator for the multipart boundary, glibc's locale lock): a
   * fork that copied one held would leave the child to wait for it forever
   * in its exit handlers (OpenSSL's and p11-kit's cleanups hung bash
   * children under the preload). Everything here but the wait for the
   * network is a section the application's fork waits out (fork_guard.h):
   * microseconds at a time. */
  cp_fork_guard_enter(); /* not in a handler: always 1 */
  CURLU *url =
      compose(r->base_url, r->target, resp->message, sizeof resp->message);
  if (!url) {
    cp_fork_guard_exit();
    return CP_HTTP_UNUSABLE;
  }
  /* Fresh handles for this attempt only: see the top of this file. */
  CURL *e = curl_easy_init();
  CURLM *multi = curl_multi_init();
  char errbuf[CURL_ERROR_SIZE] = "";
  body_capture body = {resp->message, sizeof resp->message, 0, 0};
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
  curl_mime *mime = e ? curl_mime_init(e) : NULL;
  int ok = e && multi && headers && mime;
  for (size_t i = 0; ok && i < r->nparts; i++) {
    const cp_http_part *p = &r->parts[i];
    curl_mimepart *part = curl_mime_addpart(mime);
    ok =
        part && curl_mime_name(part, p->name) == CURLE_OK &&
        curl_mime_data(part, (const char *)p->data, p->len) == CURLE_OK &&
        (!p->filename || curl_mime_filename(part, p->filename) == CURLE_OK) &&
        (!p->content_type || curl_mime_type(part, p->content_type) == CURLE_OK);
  }
  cp_http_outcome out = CP_HTTP_RETRY;
  int added = 0;
  if (!ok) {
    snprintf(resp->message, sizeof resp->message, "out of memory");
    goto cleanup;
  }
  if (restrict_protocols(e) != 0) {
    snprintf(resp->message, sizeof resp->message,
             "libcurl cannot restrict the protocols; not sent");
    out = CP_HTTP_UNUSABLE;
    goto cleanup;
  }
  /* The handle, not a string: libcurl connects to exactly the host that
   * compose kept. */
  curl_easy_setopt(e, CURLOPT_CURLU, url);
  if (r->unix_socket)
    curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, r->unix_socket);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
  /* A name still resolving when we give up (stop, exit) is left to its
   * thread instead of waited for (libcurl >= 7.87; older ones ignore it). */
  curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(e, CURLOPT_MIMEPOST, mime);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "contprof/" CONTPROF_VERSION_STRING);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, &resp->retry_after_s);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
  /* TLS: libcurl verifies the peer and the host name by default; we never
   * turn that off. */

  CURLcode code = CURLE_OK;
  int done = 0, aborted = 0;
  pthread_mutex_lock(&c->lock);
  c->multi = multi;
  aborted = atomic_load(&c->aborted);
  pthread_mutex_unlock(&c->lock);
  if (aborted) {
    out = CP_HTTP_ABORTED;
    snprintf(resp->message, sizeof resp->message, "stopped waiting");
    goto cleanup;
  }
  if (curl_multi_add_handle(multi, e) != CURLM_OK) {
    snprintf(resp->message, sizeof resp->message, "curl_multi_add_handle");
    goto cleanup;
  }
  added = 1;
  for (;;) {
    int running = 0;
    curl_multi_perform(multi, &running);
    int left;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(multi, &left)) != NULL)
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
    cp_fork_guard_exit(); /* a fork may go while we wait */
    curl_multi_poll(multi, NULL, 0, wait_ms, NULL);
    cp_fork_guard_enter();
  }
  if (aborted) {
    out = CP_HTTP_ABORTED;
    snprintf(resp->message, sizeof resp->message, "stopped waiting");
  } else if (!done) {
    snprintf(resp->message, sizeof resp->message, "transfer did not finish");
  } else if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && body.full)) {
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
    else if (s >= 300 && s < 400)
      out = redirected(e, resp);
    else if (s >= 500 || s == 429 || s == 408 || s == 0)
      out = CP_HTTP_RETRY;
    else
      out = CP_HTTP_REJECTED;
  }
cleanup:
  redact_secrets(resp->message, r->headers, r->nheaders);
  clean_message(resp->message);
  /* No cp_http_abort may wake a handle being closed. */
  pthread_mutex_lock(&c->lock);
  c->multi = NULL;
  pthread_mutex_unlock(&c->lock);
  if (added)
    curl_multi_remove_handle(multi, e);
  if (e)
    curl_easy_cleanup(e); /* closes the connection (never reused) */
  if (multi)
    curl_multi_cleanup(multi); /* closes the wakeup pair */
  curl_mime_free(mime);
  curl_slist_free_all(headers);
  curl_url_cleanup(url);
  cp_fork_guard_exit();
  return out;
}

void cp_http_redact_url(const char *url, char *out, size_t len) {
  /* Whatever comes before the last '@' after the scheme may hold a
   * password, however malformed the URL ("user:pa/ss@host", "user:p?ss@",
   * "http:/user:pw@host"): it is left out whole, and so are the query and
   * the fragment after it. */
  const char *scheme_end = strstr(url, "://");
  const char *host = scheme_end ? scheme_end + 3 : url;
  const char *at = strrchr(host, '@');
  const char *rest = at ? at + 1 : host;
  snprintf(out, len, "%.*s%s%.*s", (int)(host - url), url, at ? "***@" : "",
           (int)strcspn(rest, "?#"), rest);
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
