/* libFuzzer target for the URL rules of the HTTP sinks (src/upload/http.c):
 * the input is a base URL, a newline, and a request target. Checks that
 * classifying the base and composing the request URL never crash or leak
 * (ASan, LSan), that credentials are only ever allowed to https, a unix
 * socket or a literal loopback host, that the URL shown in messages holds
 * no user info nor query, and that no target changes the scheme, host or
 * port of the base (docs/security.md, "Backends: URLs and credentials"). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "upload/http.h"

#include "fuzz.h"

/* The scheme://authority part of a shown URL (up to its path). */
static size_t origin_len(const char *shown) {
  const char *a = strstr(shown, "://");
  EXPECT(a != NULL);
  return (size_t)(a + 3 - shown) + strcspn(a + 3, "/");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  cp_log_set_level(CP_LOG_ERROR); /* libcurl missing: one line, once */
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  char *in = malloc(size + 1);
  if (!in)
    return 0;
  memcpy(in, data, size);
  in[size] = 0; /* an embedded NUL ends the string, as in the environment */
  char *nl = strchr(in, '\n');
  const char *target = "";
  if (nl) {
    *nl = 0;
    target = nl + 1;
  }
  const char *base = in;

  cp_url_info info;
  cp_url_kind kind = cp_http_check_url(base, &info);
  EXPECT(kind >= CP_URL_INVALID && kind <= CP_URL_UNIX);
  EXPECT(cp_http_is_insecure_remote(base) ==
         !cp_http_credentials_allowed(kind));
  if (kind == CP_URL_INVALID) {
    EXPECT(info.why[0] != 0);
  } else if (kind != CP_URL_UNIX) {
    /* Shown in messages: never user info or a query. */
    size_t o = origin_len(info.shown);
    EXPECT(memchr(info.shown, '@', o) == NULL);
    EXPECT(strchr(info.shown, '?') == NULL);
    int https = strncmp(info.shown, "https://", 8) == 0;
    EXPECT(https == (kind == CP_URL_HTTPS));
    if (kind == CP_URL_HTTP_LOOPBACK) {
      /* http://HOST[:port]: the host must be a literal loopback. */
      char host[600];
      const char *h = info.shown + 7;
      size_t n = o - 7;
      if (*h == '[')
        n = strcspn(h, "]") + 1;
      else
        n = strcspn(h, ":/");
      EXPECT(n < sizeof host);
      memcpy(host, h, n);
      host[n] = 0;
      EXPECT(cp_http_host_is_loopback(host));
    }
  }
  if (kind == CP_URL_UNIX)
    EXPECT(strncmp(base, "unix:///", 8) == 0);

  char url[8192], why[160];
  if (kind != CP_URL_UNIX && cp_http_compose_url(base, target, url, sizeof url,
                                                 why, sizeof why) == 0) {
    EXPECT(kind != CP_URL_INVALID);
    EXPECT(*target == 0 || *target == '/');
    /* The request URL goes where the base goes. */
    cp_url_info again;
    cp_url_kind k2 = cp_http_check_url(url, &again);
    EXPECT(k2 == kind);
    size_t o1 = origin_len(info.shown), o2 = origin_len(again.shown);
    EXPECT(o1 == o2 && memcmp(info.shown, again.shown, o1) == 0);
    EXPECT(again.has_userinfo == info.has_userinfo);
  }
  free(in);
  return 0;
}
