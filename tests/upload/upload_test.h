/* What the upload tests share: a configuration loaded from a list of
 * "NAME=value" strings instead of the environment, and stderr captured to
 * check the `contprof:` lines a case printed. Helpers are static inline: a
 * test file includes it whole and uses what it needs. */
#ifndef CP_UPLOAD_TEST_H
#define CP_UPLOAD_TEST_H

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "exporter/export.h"
#include "test.h"
#include "upload/sink.h"

/* Hands g to sink s as the scheduler does: as a finished export. */
static inline int sink_send(cp_sink *s, const cp_generation *g,
                            const cp_export_meta *m) {
  cp_export e;
  cp_export_init(&e, g, m);
  int rc = s->send(s, &e);
  cp_export_release(&e);
  return rc;
}

typedef struct env_list {
  const char *kv[40];
} env_list;

static inline const char *env_lookup(const char *name, void *ctx) {
  env_list *e = ctx;
  size_t n = strlen(name);
  for (size_t i = 0; e->kv[i]; i++)
    if (strncmp(e->kv[i], name, n) == 0 && e->kv[i][n] == '=')
      return e->kv[i] + n + 1;
  return NULL;
}

static inline void load_config(cp_config *cfg, env_list *e) {
  CHECK_EQ_INT(cp_config_load(cfg, NULL, env_lookup, e), 0);
}

static int saved_stderr = -1;
static char capture_path[128];

/* Until capture_end, stderr goes to a file of this process. */
static inline void capture_start(void) {
  snprintf(capture_path, sizeof capture_path, "/tmp/contprof-test-err-%d",
           (int)getpid());
  fflush(stderr);
  saved_stderr = dup(2);
  int fd = open(capture_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
}

/* What was written since capture_start (a static buffer), also copied to
 * the real stderr so that it stays in the test log. */
static inline char *capture_end(void) {
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  static char buf[65536];
  int fd = open(capture_path, O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : 0;
  buf[n > 0 ? n : 0] = 0;
  if (fd >= 0)
    close(fd);
  unlink(capture_path);
  fputs(buf, stderr);
  return buf;
}

/* How many lines of text contain needle. */
static inline int count_lines_with(const char *text, const char *needle) {
  int n = 0;
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    n += memmem(line, len, needle, strlen(needle)) != NULL;
    line = end ? end + 1 : NULL;
  }
  return n;
}

#endif
