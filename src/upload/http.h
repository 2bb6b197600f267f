/* A small libcurl client for the HTTP sinks: one multipart POST at a time,
 * over TCP (http, https with certificate checks on) or a unix socket, with
 * connect and total timeouts, an absolute deadline, and a wakeup that makes
 * an in-flight request give up at once (stop, exit). Runs on the sinks'
 * threads only; never logs headers (they carry secrets). Also the URL rules
 * (docs/security.md, "Backends: URLs and credentials"): which base URLs are
 * usable, where credentials may go, and how a request's path is joined to
 * the base without ever changing its host. */
#ifndef CP_HTTP_H
#define CP_HTTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct cp_http_part {
  const char *name;
  const char *filename;     /* NULL: a plain form field */
  const char *content_type; /* NULL: libcurl's default */
  const uint8_t *data;
  size_t len;
} cp_http_part;

typedef struct cp_http_request {
  const char *base_url;       /* checked with cp_http_check_url */
  const char *target;         /* "" or a path starting with '/', with a query */
  const char *unix_socket;    /* NULL, or the socket path (base_url: http) */
  const char *const *headers; /* "Name: value" */
  size_t nheaders;
  const cp_http_part *parts;
  size_t nparts;
  long connect_timeout_ms;
  long timeout_ms;
  uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0 for none */
} cp_http_request;

typedef enum cp_http_outcome {
  CP_HTTP_OK,       /* 2xx */
  CP_HTTP_RETRY,    /* network error, timeout, 5xx, 429, 408, 3xx (a
                       redirect, not followed: kept for a corrected URL) */
  CP_HTTP_REJECTED, /* other status: the server will never accept it */
  CP_HTTP_ABORTED,  /* the deadline passed or cp_http_abort was called */
  CP_HTTP_UNUSABLE, /* not sent: the target is not a /-path, or libcurl
                       cannot restrict the protocols; never retried */
} cp_http_outcome;

typedef struct cp_http_response {
  long status;        /* 0 when no response */
  char message[256];  /* the start of the body, or libcurl's error; printable */
  long retry_after_s; /* a Retry-After in seconds (429, 503), else 0 */
} cp_http_response;

typedef struct cp_http_client cp_http_client;

/* Loads libcurl once for the process (dlopen, see http.c); 0, or -1 after
 * one message. */
int cp_http_init(void);

/* NULL (after one message) when libcurl cannot be loaded or cannot restrict
 * a transfer to http and https. Keeps no descriptor: each cp_http_post
 * makes its handles and connection and closes them before it returns
 * (docs/security.md, "Descriptors shared with the application"). */
cp_http_client *cp_http_client_create(void);
void cp_http_client_destroy(cp_http_client *c);

cp_http_outcome cp_http_post(cp_http_client *c, const cp_http_request *r,
                             cp_http_response *resp);

/* From any thread: the current and every later request of c ends at once
 * with CP_HTTP_ABORTED. */
void cp_http_abort(cp_http_client *c);

/* The url without user:password@ and without the query, for messages. */
void cp_http_redact_url(const char *url, char *out, size_t len);

/* What a base URL is, as libcurl's URL API parses it. A URL without a
 * scheme is plain http (what libcurl would speak), never secure. */
typedef enum cp_url_kind {
  CP_URL_INVALID,       /* unparsable, no host, or a scheme other than
                           http, https, unix */
  CP_URL_HTTP_REMOTE,   /* plain http to anything but a literal loopback */
  CP_URL_HTTP_LOOPBACK, /* plain http to 127.0.0.0/8, [::1] or localhost */
  CP_URL_HTTPS,
  CP_URL_UNIX, /* unix:///path/to/socket */
} cp_url_kind;

typedef struct cp_url_info {
  int has_userinfo; /* user:password@ in the URL: a credential too */
  char shown[512];  /* scheme://host[:port]/path, no user info nor query:
                       for messages (empty for CP_URL_INVALID) */
  char why[160];    /* why CP_URL_INVALID; printable, never the URL */
} cp_url_info;

/* Classifies url (info may be NULL). Loads libcurl; CP_URL_INVALID when it
 * cannot be loaded. */
cp_url_kind cp_http_check_url(const char *url, cp_url_info *info);

/* 1 when credentials (API key, bearer token, basic auth, user info) may be
 * sent to a URL of this kind: https anywhere, plain http only to a literal
 * loopback address, a unix socket. */
int cp_http_credentials_allowed(cp_url_kind kind);

/* 1 when secrets must not travel to url (cp_http_credentials_allowed of its
 * kind is 0; an invalid URL included). */
int cp_http_is_insecure_remote(const char *url);

/* 1 if host (as libcurl reports it: IPv6 in brackets) is a literal loopback
 * address (127.0.0.0/8 in dotted decimal, ::1) or the name localhost.
 * Pure: no libcurl, no DNS. 127.evil.example is not loopback. */
int cp_http_host_is_loopback(const char *host);

/* The request URL of base (http or https) and target ("" or a path starting
 * with '/', printable ASCII, no '#', optionally with a query): base's
 * scheme, user info, host and port, base's path followed by target's path,
 * base's query and then target's. Built with the URL API so that no target
 * can change the host. 0, or -1 (why says why) when target is not such a
 * path, base is not usable, or out is too small. */
int cp_http_compose_url(const char *base, const char *target, char *out,
                        size_t len, char *why, size_t why_len);

/* Base64 of data into out (NUL-terminated); returns 0 or -1 if too small. */
int cp_base64(const char *data, size_t len, char *out, size_t out_len);

/* Percent-encodes s for a query string into out. */
void cp_url_escape(const char *s, char *out, size_t len);

#endif
