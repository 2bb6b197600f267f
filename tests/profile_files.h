/* What the tests that write profiles and run the `contprof` command share
 * (tests/exporter/test_pprof.c, tests/tools/test_local_view.c): a temporary
 * directory, whole-file writes and reads, a shell command's output, the
 * contprof binary run with its output in files, and gzip bombs written
 * piecewise. Helpers are static inline: a test uses what it needs. */
#ifndef CP_TEST_PROFILE_FILES_H
#define CP_TEST_PROFILE_FILES_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "test.h"

static char tmp_dir[64];

/* NAME in this test's temporary directory (made on first use); the last 8
 * results stay valid. */
static inline const char *tmp_path(const char *name) {
  static char path[8][256];
  static int next;
  if (!tmp_dir[0]) {
    strcpy(tmp_dir, "/tmp/cp_test_files_XXXXXX");
    if (!mkdtemp(tmp_dir)) {
      perror("mkdtemp");
      exit(1);
    }
  }
  char *p = path[next++ % 8];
  snprintf(p, sizeof path[0], "%s/%s", tmp_dir, name);
  return p;
}

static inline void tmp_cleanup(void) {
  if (!tmp_dir[0])
    return;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  if (system(cmd) != 0)
    fprintf(stderr, "note: could not remove %s\n", tmp_dir);
}

static inline int write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  size_t n = fwrite(data, 1, len, f);
  return fclose(f) == 0 && n == len ? 0 : -1;
}

/* The whole file, NUL-terminated (to be freed; empty when unreadable), and
 * its length in *len when len is not NULL. Out of memory ends the test. */
static inline char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      perror("slurp");
      exit(1);
    }
    if (!f)
      break;
    if (cap - n < 2)
      buf = realloc(buf, cap *= 2);
    else {
      size_t r = fread(buf + n, 1, cap - n - 1, f);
      if (r == 0)
        break;
      n += r;
    }
  }
  if (f)
    fclose(f);
  buf[n] = '\0';
  if (len)
    *len = n;
  return buf;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* A shell command's stdout (to be freed) or NULL, and its exit status; HOME
 * and go's PPROF_TMPDIR are the temporary directory, stderr goes to
 * tmp_path("run.err"). */
static inline char *run(const char *cmd, int *status) {
  char full[2048];
  snprintf(full, sizeof full, "HOME='%s' PPROF_TMPDIR='%s' %s 2>'%s'", tmp_dir,
           tmp_dir, cmd, tmp_path("run.err"));
  FILE *f = popen(full, "r");
  if (!f)
    return NULL;
  size_t cap = 4096, len = 0, n;
  char *out = malloc(cap);
  while ((n = fread(out + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len < 2)
      out = realloc(out, cap *= 2);
  }
  out[len] = '\0';
  int st = pclose(f);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

/* Runs the contprof binary with argv (NULL-terminated, argv[0] its name),
 * stdout and stderr into the two files; returns the exit status (-1 for a
 * signal, -2 when it could not be run) and, when maxrss_kib is not NULL,
 * the child's peak RSS in KiB. */
static inline int run_contprof(char *const argv[], const char *out_path,
                               const char *err_path, long *maxrss_kib) {
  pid_t pid = fork();
  if (pid == 0) {
    int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
      _exit(126);
    execv(CP_BUILD_DIR "/contprof", argv);
    _exit(127);
  }
  int st = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  if (pid < 0 || wait4(pid, &st, 0, &ru) != pid)
    return -2;
  if (maxrss_kib)
    *maxrss_kib = ru.ru_maxrss;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Writes header then `count` copies of unit, gzipped piecewise (the
 * uncompressed profile is never held). */
static inline void write_gzip_repeated(const char *path, const uint8_t *header,
                                       size_t header_len, const uint8_t *unit,
                                       size_t unit_len, size_t count) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  CHECK_EQ_INT(deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY),
               Z_OK);
  static uint8_t chunk[1 << 16], out[1 << 16];
  size_t per_chunk = sizeof chunk / unit_len;
  for (size_t i = 0; i < per_chunk; i++)
    memcpy(chunk + i * unit_len, unit, unit_len);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f)
    return;
  zs.next_in = (Bytef *)header;
  zs.avail_in = (uInt)header_len;
  for (size_t left = count;;) {
    int finish = left == 0 && zs.avail_in == 0;
    if (zs.avail_in == 0 && left) {
      size_t n = left < per_chunk ? left : per_chunk;
      zs.next_in = chunk;
      zs.avail_in = (uInt)(n * unit_len);
      left -= n;
    }
    int zrc;
    do {
      zs.next_out = out;
      zs.avail_out = sizeof out;
      zrc = deflate(&zs, finish ? Z_FINISH : Z_NO_FLUSH);
      fwrite(out, 1, sizeof out - zs.avail_out, f);
    } while (zs.avail_out == 0);
    if (finish && zrc == Z_STREAM_END)
      break;
  }
  deflateEnd(&zs);
  fclose(f);
}

#endif
