/* The file sink: one gzip pprof per period named
 * <service>.<pid>.<UTC time>.<seq>.pb.gz in the output directory (created
 * 0700 if missing, refused unless trusted: safe_dir.h), written under a
 * temporary name and linked into place so a reader never sees half a file
 * and nothing is overwritten. Every file is made relative to the directory's
 * descriptor with O_EXCL|O_NOFOLLOW: a link planted at either name is never
 * followed. Failures are reported once per kind until a write succeeds
 * again; the program runs on. */
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
#include "safe_dir.h"
#include "sink.h"

typedef struct file_sink {
  cp_sink base;
  cp_safe_dir dir; /* kept open for the sink's life */
  int last_errno;  /* the failure already reported, 0 after a success */
} file_sink;

static void report(file_sink *fs, const char *name, int err) {
  if (fs->last_errno == err)
    return;
  fs->last_errno = err;
  cp_error("cannot write profiles: %s/%s: %s; this period's profile is lost, "
           "profiling goes on",
           fs->dir.path, name, strerror(err));
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

static int file_send(cp_sink *self, cp_export *e) {
  file_sink *fs = (file_sink *)self;
  const cp_export_meta *meta = &e->meta;
  const uint8_t *data = NULL;
  size_t len = 0;
  if (cp_export_profile(e, &data, &len) != 0) {
    cp_error("cannot encode the profile of period %" PRIu64, meta->seq);
    return -1;
  }
  int rc = -1;
  char service[128], stamp[32], final_name[320], tmp_name[256], why[1024];
  safe_name(meta->cfg->service, service, sizeof service);
  cp_utc t;
  cp_utc_of((int64_t)(meta->end_ns / 1000000000ull), &t);
  snprintf(stamp, sizeof stamp, "%04d%02d%02dT%02d%02d%02dZ", t.year, t.month,
           t.day, t.hour, t.minute, t.second);
  snprintf(tmp_name, sizeof tmp_name, ".%s.%d.%" PRIu64 ".tmp", service,
           (int)meta->pid, meta->seq);
  int dfd = cp_safe_dir_get(&fs->dir, why, sizeof why);
  if (dfd < 0) {
    if (fs->last_errno != errno)
      cp_error("cannot write profiles to the output directory: %s; this "
               "period's profile is lost, profiling goes on",
               why);
    fs->last_errno = errno;
    goto out;
  }
  cp_own_fd own;
  int fd = cp_safe_dir_create_file(dfd, tmp_name, &own);
  if (fd < 0) {
    report(fs, tmp_name, errno);
    goto out;
  }
  if (write_all(fd, data, len) != 0 || fsync(fd) != 0 ||
      cp_own_close(&own) != 0) {
    int err = errno;
    cp_own_close(&own);
    unlinkat(dfd, tmp_name, 0);
    report(fs, tmp_name, err);
    goto out;
  }
  /* linkat() fails with EEXIST instead of replacing (a link planted at the
   * final name included): never overwrite. */
  for (int attempt = 0; attempt < 100; attempt++) {
    if (attempt == 0)
      snprintf(final_name, sizeof final_name, "%s.%d.%s.%" PRIu64 ".pb.gz",
               service, (int)meta->pid, stamp, meta->seq);
    else
      snprintf(final_name, sizeof final_name, "%s.%d.%s.%" PRIu64 "-%d.pb.gz",
               service, (int)meta->pid, stamp, meta->seq, attempt);
    if (linkat(dfd, tmp_name, dfd, final_name, 0) == 0) {
      rc = 0;
      break;
    }
    if (errno != EEXIST) {
      report(fs, final_name, errno);
      break;
    }
  }
  unlinkat(dfd, tmp_name, 0);
  if (rc == 0) {
    fs->last_errno = 0;
    cp_info("wrote %s/%s (%zu bytes)", fs->dir.path, final_name, len);
  }
out:
  return rc;
}

static void file_destroy(cp_sink *self) {
  file_sink *fs = (file_sink *)self;
  cp_safe_dir_release(&fs->dir);
  free(fs);
}

cp_sink *cp_file_sink_create(const cp_config *cfg) {
  file_sink *fs = calloc(1, sizeof *fs);
  if (!fs || cp_safe_dir_init(&fs->dir, cfg->output_dir) != 0) {
    free(fs);
    return NULL;
  }
  fs->base.name = "file";
  fs->base.send = file_send;
  fs->base.destroy = file_destroy;
  return &fs->base;
}
