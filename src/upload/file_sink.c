/* The file sink: one gzip pprof per period named
 * <service>.<pid>.<UTC time>.<seq>.pb.gz in the output directory (created
 * 0700 if missing), written under a temporary name and linked into place so a
 * reader never sees half a file and nothing is overwritten. Failures are
 * reported once per kind until a write succeeds again; the program runs on. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "sink.h"

typedef struct file_sink {
  cp_sink base;
  char *dir;
  int last_errno; /* the failure already reported, 0 after a success */
} file_sink;

static void report(file_sink *fs, const char *what, const char *path, int err) {
  if (fs->last_errno == err)
    return;
  fs->last_errno = err;
  cp_error("cannot write profiles: %s %s: %s; this period's profile is lost, "
           "profiling goes on",
           what, path, strerror(err));
}

static int write_all(int fd, const uint8_t *p, size_t len) {
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n == 0 ? (errno = ENOSPC, -1) : -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Service names become part of a file name: keep it to safe characters. */
static void safe_name(const char *in, char *out, size_t len) {
  size_t i = 0;
  for (; in[i] && i + 1 < len; i++) {
    char c = in[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
             (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    out[i] = ok ? c : '_';
  }
  out[i] = 0;
  if (!i || out[0] == '.')
    snprintf(out, len, "profile");
}

static int file_send(cp_sink *self, const cp_generation *g,
                     const cp_export_meta *meta) {
  file_sink *fs = (file_sink *)self;
  uint8_t *data = NULL;
  size_t len = 0;
  if (cp_export_pprof(g, meta, CP_DIALECT_DATADOG, &data, &len) != 0) {
    cp_error("cannot encode the profile of period %" PRIu64, meta->seq);
    return -1;
  }
  int rc = -1;
  char service[128], stamp[32], final_path[4600], tmp_path[4600];
  safe_name(meta->cfg->service, service, sizeof service);
  time_t secs = (time_t)(meta->end_ns / 1000000000ull);
  struct tm tm;
  gmtime_r(&secs, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  snprintf(tmp_path, sizeof tmp_path, "%s/.%s.%d.%" PRIu64 ".tmp", fs->dir,
           service, (int)meta->pid, meta->seq);
  if (cp_make_dirs(fs->dir) != 0) {
    report(fs, "directory", fs->dir, errno);
    goto out;
  }
  int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    report(fs, "file", tmp_path, errno);
    goto out;
  }
  if (write_all(fd, data, len) != 0 || fsync(fd) != 0) {
    int err = errno;
    close(fd);
    unlink(tmp_path);
    report(fs, "file", tmp_path, err);
    goto out;
  }
  close(fd);
  /* link() fails with EEXIST instead of replacing: never overwrite. */
  for (int attempt = 0; attempt < 100; attempt++) {
    if (attempt == 0)
      snprintf(final_path, sizeof final_path, "%s/%s.%d.%s.%" PRIu64 ".pb.gz",
               fs->dir, service, (int)meta->pid, stamp, meta->seq);
    else
      snprintf(final_path, sizeof final_path,
               "%s/%s.%d.%s.%" PRIu64 "-%d.pb.gz", fs->dir, service,
               (int)meta->pid, stamp, meta->seq, attempt);
    if (link(tmp_path, final_path) == 0) {
      rc = 0;
      break;
    }
    if (errno != EEXIST) {
      report(fs, "file", final_path, errno);
      break;
    }
  }
  unlink(tmp_path);
  if (rc == 0) {
    fs->last_errno = 0;
    cp_info("wrote %s (%zu bytes)", final_path, len);
  }
out:
  free(data);
  return rc;
}

static void file_destroy(cp_sink *self) {
  file_sink *fs = (file_sink *)self;
  free(fs->dir);
  free(fs);
}

cp_sink *cp_file_sink_create(const cp_config *cfg) {
  file_sink *fs = calloc(1, sizeof *fs);
  if (!fs || !(fs->dir = strdup(cfg->output_dir))) {
    free(fs);
    return NULL;
  }
  fs->base.name = "file";
  fs->base.send = file_send;
  fs->base.destroy = file_destroy;
  return &fs->base;
}
