/* A small libcurl client for the HTTP sinks: one multipart POST at a time,
 * over TCP (http, https with certificate checks on) or a unix socket, with
 * connect and total timeouts, an absolute deadline, and a wakeup that makes
 * an in-flight request give up at once (stop, exit). Runs on the sinks'
 * threads only; never logs headers (they carry secrets). */
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
  const char *url;
  const char *unix_socket; /* NULL, or the socket path (url gives the path) */
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
  CP_HTTP_RETRY,    /* network error, timeout, 5xx, 429, 408 */
  CP_HTTP_REJECTED, /* other status: the server will never accept it */
  CP_HTTP_ABORTED,  /* the deadline passed or cp_http_abort was called */
} cp_http_outcome;

typedef struct cp_http_response {
  long status;       /* 0 when no response */
  char message[256]; /* the start of the body, or libcurl's error; printable */
} cp_http_response;

typedef struct cp_http_client cp_http_client;

cp_http_client *cp_http_client_create(void);
void cp_http_client_destroy(cp_http_client *c);

cp_http_outcome cp_http_post(cp_http_client *c, const cp_http_request *r,
                             cp_http_response *resp);

/* From any thread: the current and every later request of c ends at once
 * with CP_HTTP_ABORTED. */
void cp_http_abort(cp_http_client *c);

/* The url without user:password@ and without the query, for messages. */
void cp_http_redact_url(const char *url, char *out, size_t len);

/* 1 if url is http:// (not https) to a host other than a loopback address
 * (localhost, 127.0.0.0/8, ::1): secrets must not travel there. unix:// is
 * local. */
int cp_http_is_insecure_remote(const char *url);

/* Base64 of data into out (NUL-terminated); returns 0 or -1 if too small. */
int cp_base64(const char *data, size_t len, char *out, size_t out_len);

/* Percent-encodes s for a query string into out. */
void cp_url_escape(const char *s, char *out, size_t len);

#endif
