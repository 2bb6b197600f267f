/* The files the sinks write and read, against a hostile user of the same
 * machine (issue #15, docs/security.md "Output and spool directories" and
 * "Spool files"): links planted at the file sink's names, output and spool
 * directories that others can write or that belong to someone else, planted
 * spool files (a target aimed at another host, a FIFO, a link, another
 * owner), directories whose paths are longer than PATH_MAX, a descriptor the
 * application closes, and an empty directory name. The tests run as root (chown
 * to nobody). */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "aggregator/calltree.h"
#include "common.h"
#include "config.h"
#include "contprof/runtime.h"
#include "exporter/export.h"
#include "exporter/pprof_read.h"
#include "server.h"
#include "test.h"
#include "upload/datadog.h"
#include "upload/http_sink.h"
#include "upload/safe_dir.h"
#include "upload/sink.h"
#include "upload_test.h"

#define NOBODY 65534

/* ---- environment, stderr, generations --------------------------------- */

static cp_generation *make_generation(void) {
  cp_generation *g = cp_gen_create(1, (size_t)64 << 20);
  uint64_t stack[2] = {contprof_frame_intern("files_leaf", "files.c", 1),
                       contprof_frame_intern("files_root", "files.c", 2)};
  cp_sample_key key = {.tid = 1000};
  cp_gen_add(g, stack, 2, 0, &key, CONTPROF_KIND_CPU, 3, 30000000);
  return g;
}

static cp_export_meta make_meta(const cp_config *cfg, uint64_t seq) {
  uint64_t end = cp_realtime_ns();
  cp_export_meta m = {
      .cfg = cfg,
      .host = "testhost",
      .pid = getpid(),
      .runtime_id = "11111111-2222-4333-8444-555555555555",
      .runtime = "native",
      .runtime_version = "2.36",
      .start_ns = end - 1000000000ull,
      .end_ns = end,
      .seq = seq,
      .cpu_period_ns = 10000000,
  };
  return m;
}

static void finish(cp_sink *s, int ms) {
  if (s->finish)
    s->finish(s, cp_monotonic_ns() + (uint64_t)ms * 1000000u);
  s->destroy(s);
}

/* Starts a Datadog sink aimed at srv with dir as its spool, lets it run
 * until srv got one request or a second passed, stops it; returns what it
 * wrote on stderr (capture_end's buffer). */
static char *datadog_sink_on_spool(test_server *srv, const char *dir) {
  char url[96], spool[4200];
  snprintf(url, sizeof url, "DD_TRACE_AGENT_URL=http://127.0.0.1:%d",
           srv->port);
  snprintf(spool, sizeof spool, "CONTPROF_SPOOL_DIR=%s", dir);
  env_list e = {{url, spool, "CONTPROF_LOG_LEVEL=warn", NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  capture_start();
  cp_sink *s = cp_datadog_sink_create(&cfg);
  CHECK(s != NULL);
  srv_wait(srv, 1, 1000);
  if (s)
    finish(s, 1000);
  cp_config_free(&cfg);
  return capture_end();
}

/* ---- files ---------------------------------------------------------------
 */

static char *temp_dir(void) {
  static char dirs[8][64];
  static int next;
  char *p = dirs[next++ % 8];
  snprintf(p, 64, "/tmp/contprof-files-XXXXXX");
  return mkdtemp(p);
}

static void remove_tree(const char *dir) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "cannot remove %s\n", dir);
}

static void write_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0);
  CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
}

static int file_is(const char *path, const char *text) {
  char buf[4096];
  int fd = open(path, O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0)
    close(fd);
  if (n < 0)
    return 0;
  buf[n] = 0;
  return strcmp(buf, text) == 0;
}

/* Entries of dir whose names end with suffix (at most 8 names kept). */
static int count_entries(const char *dir, const char *suffix,
                         char names[][256]) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  size_t sl = strlen(suffix);
  while (d && (e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < sl || strcmp(e->d_name + len - sl, suffix) != 0)
      continue;
    if (names && n < 8)
      snprintf(names[n], 256, "%s", e->d_name);
    n++;
  }
  if (d)
    closedir(d);
  return n;
}

/* A spool file as a sink writes it (spool.c's format, written out here so
 * that this test builds against the code before the fix too). */
static void put_u64(FILE *f, uint64_t v) { fwrite(&v, sizeof v, 1, f); }
static void put_s(FILE *f, const char *s) {
  put_u64(f, strlen(s));
  fwrite(s, 1, strlen(s), f);
}

static void write_spool_file(const char *path, const char *target,
                             uint64_t order) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f)
    return;
  fwrite("CPSPOOL1", 1, 8, f);
  put_s(f, target);
  put_u64(f, order);
  put_u64(f, 1);
  put_s(f, "profile");
  put_s(f, "profile.pprof");
  put_s(f, "application/octet-stream");
  put_s(f, "not really a profile");
  fclose(f);
}

/* A pid that no process has now. */
static pid_t dead_pid(void) {
  pid_t pid = fork();
  if (pid == 0)
    _exit(0);
  waitpid(pid, NULL, 0);
  return pid;
}

/* ---- (f) an empty directory name --------------------------------------- */

/* cp_make_dirs("") read past the empty string into uninitialised stack (an
 * ASan report); the directories are now opened by cp_safe_dir_open alone,
 * which refuses "" with a sentence. */
static void test_empty_dir_name(void) {
  char why[256] = "";
  errno = 0;
  CHECK_EQ_INT(cp_safe_dir_open("", why, sizeof why), -1);
  CHECK_EQ_INT(errno, ENOENT);
  CHECK(strstr(why, "empty") != NULL);
}

/* ---- (a) links planted at the file sink's names -------------------------- */

static void test_planted_links(void) {
  char *dir = temp_dir();
  char victim[] = "/tmp/contprof-victim-XXXXXX";
  char victim2[] = "/tmp/contprof-victim2-XXXXXX";
  close(mkstemp(victim));
  close(mkstemp(victim2));
  write_text(victim, "precious");
  write_text(victim2, "precious too");
  char out[128];
  snprintf(out, sizeof out, "CONTPROF_OUTPUT_DIR=%s", dir);
  env_list e = {{out, "CONTPROF_SERVICE=svc", "CONTPROF_LOG_LEVEL=warn", NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  cp_export_meta m = make_meta(&cfg, 5);
  /* The names the sink will use: .svc.PID.SEQ.tmp, svc.PID.STAMP.SEQ.pb.gz */
  char tmp_link[256], final_link[256], stamp[32];
  time_t secs = (time_t)(m.end_ns / 1000000000ull);
  struct tm tm;
  gmtime_r(&secs, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  snprintf(tmp_link, sizeof tmp_link, "%s/.svc.%d.5.tmp", dir, (int)getpid());
  snprintf(final_link, sizeof final_link, "%s/svc.%d.%s.5.pb.gz", dir,
           (int)getpid(), stamp);
  CHECK_EQ_INT(symlink(victim, tmp_link), 0);
  CHECK_EQ_INT(symlink(victim2, final_link), 0);

  cp_sink *s = cp_file_sink_create(&cfg);
  cp_generation *g = make_generation();
  capture_start();
  int rc = sink_send(s, g, &m);
  char *err = capture_end();
  s->destroy(s);
  /* Written beside the planted links, neither followed nor replaced. */
  CHECK_EQ_INT(rc, 0);
  CHECK(file_is(victim, "precious"));
  CHECK(file_is(victim2, "precious too"));
  struct stat st;
  CHECK(lstat(final_link, &st) == 0 && S_ISLNK(st.st_mode));
  char names[8][256];
  CHECK_EQ_INT(count_entries(dir, ".tmp", NULL), 0);
  int n = count_entries(dir, ".pb.gz", names);
  CHECK_EQ_INT(n, 2); /* the planted link and the profile */
  int profiles = 0;
  for (int i = 0; i < n && i < 8; i++) {
    char path[2400];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    CHECK_EQ_INT(st.st_nlink, 1);
    CHECK_EQ_INT(st.st_mode & 0777, 0600);
    pprof_profile *p = NULL;
    char why[256];
    CHECK_EQ_INT(pprof_read_file(path, &p, why, sizeof why), 0);
    if (p)
      pprof_profile_free(p);
    profiles++;
  }
  CHECK_EQ_INT(profiles, 1);
  CHECK(strstr(err, "contprof:") == NULL);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  unlink(victim);
  unlink(victim2);
  remove_tree(dir);
}

/* ---- (b) output directories others can write or own ---------------------- */

/* Two periods into dir: both refused with one line naming why; nothing
 * written there. */
static void expect_refused(const char *dir, const char *why) {
  char out[200];
  snprintf(out, sizeof out, "CONTPROF_OUTPUT_DIR=%s", dir);
  env_list e = {{out, "CONTPROF_SERVICE=svc", "CONTPROF_LOG_LEVEL=warn", NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  cp_sink *s = cp_file_sink_create(&cfg);
  cp_generation *g = make_generation();
  capture_start();
  for (uint64_t seq = 0; seq < 2; seq++) {
    cp_export_meta m = make_meta(&cfg, seq);
    CHECK_EQ_INT(sink_send(s, g, &m), -1);
  }
  char *err = capture_end();
  s->destroy(s);
  CHECK_EQ_INT(count_lines_with(err, "contprof:"), 1);
  CHECK_EQ_INT(count_lines_with(err, why), 1);
  CHECK_EQ_INT(count_entries(dir, ".pb.gz", NULL), 0);
  CHECK_EQ_INT(count_entries(dir, ".tmp", NULL), 0);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
}

static int write_one(const char *dir) {
  char out[200];
  snprintf(out, sizeof out, "CONTPROF_OUTPUT_DIR=%s", dir);
  env_list e = {{out, "CONTPROF_SERVICE=svc", "CONTPROF_LOG_LEVEL=warn", NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  cp_sink *s = cp_file_sink_create(&cfg);
  cp_generation *g = make_generation();
  cp_export_meta m = make_meta(&cfg, 0);
  int rc = sink_send(s, g, &m);
  s->destroy(s);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  return rc == 0 && count_entries(dir, ".pb.gz", NULL) == 1;
}

static void test_untrusted_output_dir(void) {
  char *dir = temp_dir();
  CHECK_EQ_INT(chmod(dir, 0777), 0);
  expect_refused(dir, "writable by group or others (mode 0777)");
  CHECK_EQ_INT(chmod(dir, 0770), 0);
  expect_refused(dir, "writable by group or others (mode 0770)");
  CHECK_EQ_INT(chmod(dir, 0700), 0);
  CHECK_EQ_INT(chown(dir, NOBODY, NOBODY), 0);
  expect_refused(dir, "owned by uid 65534");
  /* A directory on the way that others could rename things in. */
  CHECK_EQ_INT(chown(dir, 0, 0), 0);
  CHECK_EQ_INT(chmod(dir, 0777), 0);
  char sub[128];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  expect_refused(sub, "on the way to");
  struct stat st;
  CHECK(stat(sub, &st) != 0); /* not even created */
  /* Sticky like /tmp: acceptable on the way; the directory made 0700. */
  CHECK_EQ_INT(chmod(dir, 01777), 0);
  CHECK(write_one(sub));
  CHECK(stat(sub, &st) == 0 && (st.st_mode & 07777) == 0700);
  /* A link on the way is followed only when root or we made it. */
  char *other = temp_dir(), link[128], via[160];
  snprintf(link, sizeof link, "%s/link", dir);
  CHECK_EQ_INT(symlink(other, link), 0);
  snprintf(via, sizeof via, "%s/out", link);
  CHECK(write_one(via));
  CHECK_EQ_INT(lchown(link, NOBODY, NOBODY), 0);
  snprintf(via, sizeof via, "%s/out2", link);
  expect_refused(via, "symbolic link owned by uid 65534");
  remove_tree(other);
  remove_tree(dir);
}

/* The application closes our directory's descriptor and opens another
 * directory at the same number: the sink notices (device and inode), opens
 * its own again and leaves the application's alone. */
static void test_closed_dir_fd(void) {
  char *dir = temp_dir(), *other = temp_dir();
  char out[200];
  snprintf(out, sizeof out, "CONTPROF_OUTPUT_DIR=%s", dir);
  env_list e = {{out, "CONTPROF_SERVICE=svc", "CONTPROF_LOG_LEVEL=warn", NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  cp_sink *s = cp_file_sink_create(&cfg);
  cp_generation *g = make_generation();
  cp_export_meta m = make_meta(&cfg, 0);
  CHECK_EQ_INT(sink_send(s, g, &m), 0);
  /* Find the sink's descriptor by what it points to (above the numbers
   * the application allocates from: src/own_fd.h). */
  int ours = -1;
  for (int fd = 3; fd < 65536 && ours < 0; fd++) {
    char p[64], target[256];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(p, target, sizeof target - 1);
    if (n > 0 && (target[n] = 0, strcmp(target, dir) == 0))
      ours = fd;
  }
  CHECK(ours >= 0);
  CHECK(ours >= cp_own_fd_floor());
  close(ours);
  /* The application's directory at that number (dup2: the number is above
   * the lowest free one an open would get). */
  int opened = open(other, O_RDONLY | O_DIRECTORY);
  int app = dup2(opened, ours);
  close(opened);
  CHECK_EQ_INT(app, ours);
  m = make_meta(&cfg, 1);
  CHECK_EQ_INT(sink_send(s, g, &m), 0);
  s->destroy(s);
  CHECK_EQ_INT(count_entries(dir, ".pb.gz", NULL), 2);
  CHECK_EQ_INT(count_entries(other, ".pb.gz", NULL), 0);
  struct stat st;
  CHECK(fstat(app, &st) == 0 && S_ISDIR(st.st_mode)); /* still open */
  close(app);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  remove_tree(dir);
  remove_tree(other);
}

/* ---- (c) a spool file aimed at another host ------------------------------ */

static void test_spool_foreign_target(void) {
  test_server *srv = srv_start(NULL);
  /* Where the stolen request would go: a listener on 127.0.0.2 that the
   * kernel accepts connections for without anyone answering. */
  int thief = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(0x7f000002)};
  socklen_t alen = sizeof a;
  CHECK(bind(thief, (struct sockaddr *)&a, sizeof a) == 0 &&
        listen(thief, 16) == 0 &&
        getsockname(thief, (struct sockaddr *)&a, &alen) == 0);
  char *dir = temp_dir();
  pid_t gone = dead_pid();
  uint64_t now = cp_realtime_ns();
  char path[256], target[128];
  snprintf(target, sizeof target, "@127.0.0.2:%d/steal", ntohs(a.sin_port));
  snprintf(path, sizeof path, "%s/pyroscope.%020" PRIu64 ".%d.0.spool", dir,
           now, (int)gone);
  write_spool_file(path, target, now);
  /* And one a previous process really left: delivered. */
  snprintf(path, sizeof path, "%s/pyroscope.%020" PRIu64 ".%d.1.spool", dir,
           now + 1, (int)gone);
  write_spool_file(path, "/ingest?name=left%7Bover%7D&from=1", now + 1);

  char addr[96], spool[128];
  snprintf(addr, sizeof addr, "PYROSCOPE_SERVER_ADDRESS=http://127.0.0.1:%d",
           srv->port);
  snprintf(spool, sizeof spool, "CONTPROF_SPOOL_DIR=%s", dir);
  env_list e = {{addr, spool, "PYROSCOPE_AUTH_TOKEN=tok-must-not-leak",
                 "CONTPROF_UPLOAD_TIMEOUT=1s", "CONTPROF_LOG_LEVEL=warn",
                 NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  capture_start();
  cp_sink *s = cp_pyroscope_sink_create(&cfg);
  CHECK(s != NULL);
  srv_wait(srv, 1, 3000);
  usleep(300000); /* a request to the thief would have connected by now */
  if (s)
    finish(s, 1500);
  char *err = capture_end();
  int stolen = accept(thief, NULL, NULL);
  CHECK(stolen < 0);
  if (stolen >= 0)
    close(stolen);
  close(thief);
  pthread_mutex_lock(&srv->lock);
  CHECK_EQ_INT(srv->nreqs, 1);
  for (size_t i = 0; i < srv->nreqs; i++) {
    CHECK(strstr(srv->reqs[i].target, "steal") == NULL);
    CHECK_EQ_STR(srv->reqs[i].target, "/ingest?name=left%7Bover%7D&from=1");
  }
  pthread_mutex_unlock(&srv->lock);
  CHECK_EQ_INT(count_entries(dir, ".spool", NULL), 0); /* removed */
  CHECK_EQ_INT(count_lines_with(err, "removed 1 spool file unsent"), 1);
  CHECK(strstr(err, "tok-must-not-leak") == NULL);
  cp_config_free(&cfg);
  remove_tree(dir);
  srv_stop(srv);
}

/* ---- (d) a FIFO named like a spool file -----------------------------------
 */

static void test_spool_fifo(void) {
  char *dir = temp_dir(), path[256];
  snprintf(path, sizeof path, "%s/datadog.%020" PRIu64 ".%d.0.spool", dir,
           cp_realtime_ns(), (int)dead_pid());
  CHECK_EQ_INT(mkfifo(path, 0600), 0);
  char spool[128];
  snprintf(spool, sizeof spool, "CONTPROF_SPOOL_DIR=%s", dir);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("LD_PRELOAD", CP_BUILD_DIR "/libcontprof_preload.so", 1);
    setenv("CONTPROF_EXPORT", "datadog", 1);
    setenv("DD_TRACE_AGENT_URL", "http://127.0.0.1:1", 1);
    setenv("CONTPROF_EXIT_TIMEOUT", "100ms", 1);
    setenv("CONTPROF_LOG_LEVEL", "warn", 1);
    setenv("CONTPROF_CPU_HZ", "1000", 1);
    putenv(spool);
    /* A tenth of a second of CPU or more: its exit profile has samples. */
    execl("/bin/sh", "sh", "-c",
          "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done", (char *)NULL);
    _exit(127);
  }
  /* A deadline for a hang, far above what a start and exit take. */
  int status = 0, hung = 1;
  for (int i = 0; i < 3000; i++) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      hung = 0;
      break;
    }
    usleep(10000);
  }
  if (hung) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  CHECK(!hung);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  struct stat st;
  CHECK(lstat(path, &st) != 0); /* refused and removed */
  /* What is left is the child's own exit profile, kept because the agent
   * is unreachable: a regular file named with the child's pid (".PID-TOKEN."
   * while it holds the spool's lock file, ".PID." otherwise: spool.c),
   * never the FIFO. */
  char names[8][256], own[32], own_locked[32];
  snprintf(own, sizeof own, ".%d.", (int)pid);
  snprintf(own_locked, sizeof own_locked, ".%d-", (int)pid);
  int n = count_entries(dir, ".spool", names);
  int open_dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CHECK_EQ_INT(n, 1);
  for (int i = 0; i < n && i < 8; i++) {
    CHECK(strstr(names[i], own) != NULL ||
          strstr(names[i], own_locked) != NULL);
    CHECK(fstatat(open_dir, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISREG(st.st_mode));
  }
  close(open_dir);
  remove_tree(dir);
}

/* ---- (e) spool files that are links or not ours -------------------------- */

static void test_spool_unsafe_files(void) {
  test_server *srv = srv_start(NULL);
  char *dir = temp_dir(), *elsewhere = temp_dir();
  pid_t gone = dead_pid();
  uint64_t now = cp_realtime_ns();
  char outside[256], path[256];
  snprintf(outside, sizeof outside, "%s/real.spool", elsewhere);
  write_spool_file(outside, "/profiling/v1/input", now);
  /* A link to a file elsewhere. */
  snprintf(path, sizeof path, "%s/datadog.%020" PRIu64 ".%d.0.spool", dir, now,
           (int)gone);
  CHECK_EQ_INT(symlink(outside, path), 0);
  /* Another user's file. */
  snprintf(path, sizeof path, "%s/datadog.%020" PRIu64 ".%d.1.spool", dir,
           now + 1, (int)gone);
  write_spool_file(path, "/profiling/v1/input", now + 1);
  CHECK_EQ_INT(chown(path, NOBODY, NOBODY), 0);
  /* Ours, but anyone could have written it. */
  snprintf(path, sizeof path, "%s/datadog.%020" PRIu64 ".%d.2.spool", dir,
           now + 2, (int)gone);
  write_spool_file(path, "/profiling/v1/input", now + 2);
  CHECK_EQ_INT(chmod(path, 0666), 0);

  char *err = datadog_sink_on_spool(srv, dir);
  CHECK_EQ_INT(srv_wait(srv, 1, 0), 0);
  CHECK_EQ_INT(count_entries(dir, ".spool", NULL), 0);
  CHECK_EQ_INT(count_lines_with(err, "removed 3 spool files unsent"), 1);
  struct stat st;
  CHECK(lstat(outside, &st) == 0 && S_ISREG(st.st_mode)); /* untouched */
  remove_tree(dir);
  remove_tree(elsewhere);
  srv_stop(srv);
}

/* A spool directory others can write: not read, not written. */
static void test_untrusted_spool_dir(void) {
  test_server *srv = srv_start(NULL);
  char *dir = temp_dir(), path[256];
  uint64_t now = cp_realtime_ns();
  snprintf(path, sizeof path, "%s/datadog.%020" PRIu64 ".%d.0.spool", dir, now,
           (int)dead_pid());
  write_spool_file(path, "/profiling/v1/input", now);
  CHECK_EQ_INT(chmod(dir, 0777), 0);
  char *err = datadog_sink_on_spool(srv, dir);
  CHECK_EQ_INT(srv_wait(srv, 1, 0), 0);
  CHECK_EQ_INT(count_lines_with(err, "writable by group or others"), 1);
  CHECK_EQ_INT(count_entries(dir, ".spool", NULL), 1); /* left alone */
  remove_tree(dir);
  srv_stop(srv);
}

/* ---- 10: directories longer than PATH_MAX ---------------------------------
 */

/* base/ddd.../ddd... (20 components of 240 bytes): about 4.8 KB. */
static void long_path(const char *base, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "%s", base);
  for (int i = 0; i < 20 && n + 242 < cap; i++) {
    out[n++] = '/';
    memset(out + n, 'a' + i, 240);
    n += 240;
    out[n] = 0;
  }
}

/* Entries ending with suffix in a directory too deep for one path. */
static int count_deep(const char *base, const char *suffix) {
  int fd = open(base, O_RDONLY | O_DIRECTORY);
  for (int i = 0; i < 20 && fd >= 0; i++) {
    char name[241];
    memset(name, 'a' + i, 240);
    name[240] = 0;
    int next = openat(fd, name, O_RDONLY | O_DIRECTORY);
    close(fd);
    fd = next;
  }
  if (fd < 0)
    return -1;
  DIR *d = fdopendir(fd);
  int n = 0;
  struct dirent *e;
  size_t sl = strlen(suffix);
  while (d && (e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    n += len >= sl && strcmp(e->d_name + len - sl, suffix) == 0;
  }
  if (d)
    closedir(d);
  return n;
}

static void test_long_dirs(void) {
  char *base = temp_dir();
  static char deep[6000], env_spool[6100], env_out[6100];
  long_path(base, deep, sizeof deep);
  CHECK(strlen(deep) > 4096);
  /* The file sink. */
  snprintf(env_out, sizeof env_out, "CONTPROF_OUTPUT_DIR=%s", deep);
  env_list fe = {{env_out, "CONTPROF_LOG_LEVEL=warn", NULL}};
  cp_config cfg;
  load_config(&cfg, &fe);
  cp_sink *s = cp_file_sink_create(&cfg);
  cp_generation *g = make_generation();
  cp_export_meta m = make_meta(&cfg, 0);
  CHECK_EQ_INT(sink_send(s, g, &m), 0);
  s->destroy(s);
  CHECK_EQ_INT(count_deep(base, ".pb.gz"), 1);
  cp_config_free(&cfg);
  /* The spool: kept there by one sink, delivered by the next. */
  test_server *srv = srv_create(NULL);
  char url[96];
  snprintf(url, sizeof url, "DD_TRACE_AGENT_URL=http://127.0.0.1:%d",
           srv->port);
  snprintf(env_spool, sizeof env_spool, "CONTPROF_SPOOL_DIR=%s", deep);
  env_list e = {{url, env_spool, "CONTPROF_RETRY_INITIAL=20ms",
                 "CONTPROF_LOG_LEVEL=error", NULL}};
  load_config(&cfg, &e);
  s = cp_datadog_sink_create(&cfg);
  m = make_meta(&cfg, 1);
  CHECK_EQ_INT(sink_send(s, g, &m), 0);
  usleep(100000);
  finish(s, 200);
  CHECK_EQ_INT(count_deep(base, ".spool"), 1);
  srv_listen(srv);
  s = cp_datadog_sink_create(&cfg);
  CHECK_EQ_INT(srv_wait(srv, 1, 3000), 1);
  finish(s, 1000);
  CHECK_EQ_INT(count_deep(base, ".spool"), 0);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
  remove_tree(base);
}

TEST_MAIN(T(test_empty_dir_name), T(test_planted_links),
          T(test_untrusted_output_dir), T(test_closed_dir_fd),
          T(test_spool_foreign_target), T(test_spool_fifo),
          T(test_spool_unsafe_files), T(test_untrusted_spool_dir),
          T(test_long_dirs))
