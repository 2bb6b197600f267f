/* Privileged programs (issue #15, item 1): a setuid-root program linked with
 * libcontprof.so, run by nobody with a hostile environment, must not let
 * that environment choose where it writes. Before the fix, its
 * CONTPROF_OUTPUT_DIR, a directory of nobody's holding a symbolic link at the
 * temporary file's name, made it overwrite a root-only 0600 file.
 *
 * Needs root (it installs the program setuid-root in a directory it makes
 * under /tmp and drops to nobody to run it): skipped otherwise. The switch
 * root uses to allow profiling there, /etc/contprof/allow-setuid, and the
 * fixed output directory, /var/lib/contprof/setuid, are made in a private
 * mount namespace (overlays over /etc and /var/lib whose upper layers are in
 * the test's directory): the machine's /etc and /var/lib are not touched. */
#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>

#include "common.h"
#include "contprof/profiler.h"
#include "harness.h"
#include "test.h"

#define SETUID_PROG CP_BUILD_DIR "/tests/setuid_prog"
#define WORKLOAD CP_BUILD_DIR "/tests/workload"
#define PRELOAD CP_BUILD_DIR "/libcontprof_preload.so"
#define NOBODY 65534
#define SECRET "root's secret\n"

static char dir[128];

static void path_in(char *out, size_t len, const char *name) {
  snprintf(out, len, "%s/%s", dir, name);
}

static int write_file(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) && chmod(path, mode) == 0 ? 0 : -1;
}

static char *read_text(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;
  if (fd >= 0)
    close(fd);
  buf[n > 0 ? n : 0] = 0;
  return buf;
}

static int copy_file(const char *from, const char *to, mode_t mode) {
  int in = open(from, O_RDONLY | O_CLOEXEC);
  int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
  int ok = in >= 0 && out >= 0;
  char buf[65536];
  ssize_t n;
  while (ok && (n = read(in, buf, sizeof buf)) > 0)
    ok = write(out, buf, (size_t)n) == n;
  if (in >= 0)
    close(in);
  if (out >= 0)
    close(out);
  /* chown before chmod: chown clears the set-user-ID bit. */
  return ok && chown(to, 0, 0) == 0 && chmod(to, mode) == 0 ? 0 : -1;
}

/* Entries of path other than . and .. */
static int count_entries(const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

typedef enum { NO_SWITCH, SWITCH, SWITCH_WRITABLE } scenario;

/* How a run is set up: the switch, and whether /etc/ld.so.preload names
 * the test's copy of the preload library (which the loader honours in a
 * setuid program too: contprof deployed system-wide). */
typedef struct setup {
  scenario sc;
  int preload;
} setup;

/* Layers of the overlays, made by the parent before each run. */
static int make_layers(setup su) {
  scenario sc = su.sc;
  char p[256];
  static const char *const dirs[] = {"etc-upper", "etc-work", "var-upper",
                                     "var-work", "etc-upper/contprof"};
  for (size_t i = 0; i < CP_ARRAY_SIZE(dirs); i++) {
    path_in(p, sizeof p, dirs[i]);
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
      return -1;
  }
  path_in(p, sizeof p, "etc-upper/ld.so.preload");
  unlink(p);
  if (su.preload) {
    char lib[300];
    path_in(lib, sizeof lib, "lib/libcontprof_preload.so\n");
    if (write_file(p, lib, 0644) != 0)
      return -1;
  }
  path_in(p, sizeof p, "etc-upper/contprof/allow-setuid");
  unlink(p);
  if (sc == NO_SWITCH)
    return 0;
  return write_file(p, "", sc == SWITCH ? 0644 : 0666);
}

/* In the child, as root: a private mount namespace with /etc and /var/lib
 * overlaid by the test's layers. */
static int enter_namespace(void) {
  char opts[1024], upper[256], work[256];
  if (unshare(CLONE_NEWNS) != 0 ||
      mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
    return -1;
  static const struct {
    const char *target, *upper, *work;
  } layers[] = {{"/etc", "etc-upper", "etc-work"},
                {"/var/lib", "var-upper", "var-work"}};
  for (size_t i = 0; i < CP_ARRAY_SIZE(layers); i++) {
    path_in(upper, sizeof upper, layers[i].upper);
    path_in(work, sizeof work, layers[i].work);
    snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s",
             layers[i].target, upper, work);
    if (mount("overlay", layers[i].target, "overlay", 0, opts) != 0)
      return -1;
  }
  return 0;
}

typedef struct outcome {
  int ran; /* 0: the namespace could not be made (skip) */
  int euid, ruid, start;
  char err[4096];
} outcome;

/* Runs argv (a program in the test's directory) as nobody with the hostile
 * environment, whose CONTPROF_OUTPUT_DIR is the directory named out_dir
 * there; before it runs, "drop" gets symbolic links at the temporary file
 * names of its first profiles, pointing at the root-only file. */
static outcome run_as_nobody(char *const argv[], setup su,
                             const char *out_dir) {
  outcome o = {0};
  char out_path[256], err_path[256], drop[256], victim[256];
  path_in(out_path, sizeof out_path, "out");
  path_in(err_path, sizeof err_path, "err");
  path_in(drop, sizeof drop, out_dir);
  path_in(victim, sizeof victim, "victim/secret");
  char env_dir[300], env_spool[300];
  snprintf(env_dir, sizeof env_dir, "CONTPROF_OUTPUT_DIR=%s", drop);
  snprintf(env_spool, sizeof env_spool, "CONTPROF_SPOOL_DIR=%s", drop);
  char *env[] = {env_dir,
                 env_spool,
                 "CONTPROF_SERVICE=x",
                 "CONTPROF_CPU_HZ=1000",
                 "CONTPROF_LOG_LEVEL=debug",
                 "CONTPROF_EXPORT=file",
                 "PATH=/usr/bin:/bin",
                 NULL};
  CHECK(write_file(victim, SECRET, 0600) == 0); /* each run on its own */
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0)
    return o;
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 0) /* the links are planted: EOF */
      _exit(125);
    if ((su.sc != NO_SWITCH || su.preload) && enter_namespace() != 0)
      _exit(77);
    int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
      _exit(124);
    if (setgroups(0, NULL) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 ||
        setresuid(NOBODY, NOBODY, NOBODY) != 0)
      _exit(123);
    execve(argv[0], argv, env);
    _exit(127);
  }
  close(go[0]);
  int plant = strcmp(out_dir, "drop") == 0; /* not in the control's */
  for (int seq = 0; plant && seq < 4; seq++) {
    char link_path[300];
    snprintf(link_path, sizeof link_path, "%s/.x.%d.%d.tmp", drop, (int)pid,
             seq);
    CHECK(symlink(victim, link_path) == 0);
    CHECK(lchown(link_path, NOBODY, NOBODY) == 0);
  }
  close(go[1]);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
    return o;
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  o.ran = 1;
  char text[256];
  if (sscanf(read_text(out_path, text, sizeof text), "ruid=%d euid=%d start=%d",
             &o.ruid, &o.euid, &o.start) != 3)
    o.euid = o.ruid = -1;
  read_text(err_path, o.err, sizeof o.err);
  if (o.err[0])
    printf("stderr of %s:\n%s", argv[0], o.err);
  return o;
}

/* The hostile directory holds only the planted links; the secret is as
 * it was. */
static void check_untouched(const char *out_dir) {
  char drop[256], victim[256], text[256];
  path_in(drop, sizeof drop, out_dir);
  path_in(victim, sizeof victim, "victim/secret");
  CHECK_EQ_STR(read_text(victim, text, sizeof text), SECRET);
  struct stat st;
  CHECK(stat(victim, &st) == 0 && st.st_uid == 0 &&
        (st.st_mode & 07777) == 0600 && st.st_nlink == 1);
  DIR *d = opendir(drop);
  CHECK(d != NULL);
  struct dirent *e;
  int links = 0;
  while (d && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    char p[600];
    snprintf(p, sizeof p, "%s/%s", drop, e->d_name);
    int is_link = lstat(p, &st) == 0 && S_ISLNK(st.st_mode);
    if (!is_link)
      printf("written into the hostile directory: %s\n", e->d_name);
    CHECK(is_link);
    links += is_link;
    if (is_link)
      unlink(p); /* the next run plants its own */
  }
  if (d)
    closedir(d);
  CHECK_EQ_INT(links, 4);
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st;
  (void)ftw;
  return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* The test's directory: the setuid-root copies, the preload library, the
 * root-only secret and nobody's directories. 0 when the tests must skip. */
static int prepare(void) {
  static int state; /* 0: not yet, 1: ready, -1: skip */
  if (state)
    return state > 0;
  state = -1;
  if (geteuid() != 0) {
    printf("SKIP test_setuid: needs root (installs setuid-root programs)\n");
    return 0;
  }
  const char *made = make_temp_dir("setuid");
  CHECK(made != NULL);
  if (!made)
    return 0;
  snprintf(dir, sizeof dir, "%s", made);
  char p[256];
  static const struct {
    const char *from, *to;
    mode_t mode;
  } copies[] = {{SETUID_PROG, "setuid_prog", 04755},
                {WORKLOAD, "setuid_workload", 04755},
                {WORKLOAD, "plain_workload", 0755},
                {PRELOAD, "lib/libcontprof_preload.so", 0755}};
  path_in(p, sizeof p, "lib");
  CHECK(chmod(dir, 0755) == 0 && mkdir(p, 0755) == 0);
  for (size_t i = 0; i < CP_ARRAY_SIZE(copies); i++) {
    path_in(p, sizeof p, copies[i].to);
    CHECK(copy_file(copies[i].from, p, copies[i].mode) == 0);
  }
  path_in(p, sizeof p, "victim");
  CHECK(mkdir(p, 0700) == 0);
  path_in(p, sizeof p, "victim/secret");
  CHECK(write_file(p, SECRET, 0600) == 0);
  static const char *const nobodys[] = {"drop", "mine"};
  for (size_t i = 0; i < CP_ARRAY_SIZE(nobodys); i++) {
    path_in(p, sizeof p, nobodys[i]);
    CHECK(mkdir(p, 0755) == 0 && chown(p, NOBODY, NOBODY) == 0);
  }
  state = 1;
  return 1;
}

/* A setuid-root program linked with libcontprof.so that calls
 * contprof_start(NULL). */
static void test_setuid_linked(void) {
  if (!prepare())
    return;
  char prog[256];
  path_in(prog, sizeof prog, "setuid_prog");
  char *argv[] = {prog, NULL};

  /* No switch: off, silently (the level the environment asks for is not
   * obeyed), nothing written. */
  CHECK(make_layers((setup){NO_SWITCH, 0}) == 0);
  outcome o = run_as_nobody(argv, (setup){NO_SWITCH, 0}, "drop");
  if (o.euid != 0) {
    printf("SKIP test_setuid_linked: the set-user-ID bit was not honoured "
           "(euid %d; a nosuid mount?)\n",
           o.euid);
    return;
  }
  CHECK_EQ_INT(o.ruid, NOBODY);
  CHECK_EQ_INT(o.start, CONTPROF_ERR_DISABLED);
  CHECK(strstr(o.err, "contprof:") == NULL);
  check_untouched("drop");

  /* The switch, but writable by others: still off. */
  CHECK(make_layers((setup){SWITCH_WRITABLE, 0}) == 0);
  o = run_as_nobody(argv, (setup){SWITCH_WRITABLE, 0}, "drop");
  if (!o.ran) {
    printf("SKIP the allow-setuid runs: no private mount namespace with "
           "overlays here\n");
    return;
  }
  CHECK_EQ_INT(o.start, CONTPROF_ERR_DISABLED);
  check_untouched("drop");

  /* The switch: profiled with built-in settings into the fixed directory,
   * named after the executable; the environment is still ignored. */
  CHECK(make_layers((setup){SWITCH, 0}) == 0);
  o = run_as_nobody(argv, (setup){SWITCH, 0}, "drop");
  CHECK(o.ran);
  CHECK_EQ_INT(o.start, 0);
  CHECK(strstr(o.err, "contprof:") == NULL);
  check_untouched("drop");
  char out_dir[256];
  path_in(out_dir, sizeof out_dir, "var-upper/contprof/setuid");
  struct stat st;
  CHECK(stat(out_dir, &st) == 0 && st.st_uid == 0 && (st.st_mode & 077) == 0);
  pprof_profile *profiles[4];
  static char names[4][512];
  size_t n = read_profiles(out_dir, profiles, 4, names);
  CHECK_EQ_INT(n, 1);
  CHECK_EQ_INT(count_entries(out_dir), 1);
  for (size_t i = 0; i < n; i++) {
    CHECK(strstr(names[i], "/setuid_prog.") != NULL);
    CHECK(stat(names[i], &st) == 0 && st.st_uid == 0 &&
          (st.st_mode & 07777) == 0600);
    CHECK_EQ_STR(profile_comment(profiles[i], "service"), "setuid_prog");
    CHECK(profiles[i]->n_sample > 0);
    pprof_profile_free(profiles[i]);
  }
}

/* contprof deployed system-wide: /etc/ld.so.preload names the preload
 * library, which the loader then maps into setuid programs too. The same
 * unmodified program, as nobody: a plain copy profiles itself where its
 * environment says (the preload works), the setuid-root copy does not and
 * writes nothing (its constructor sees AT_SECURE). */
static void test_setuid_preloaded(void) {
  if (!prepare())
    return;
  char plain[256], setuid[256];
  path_in(plain, sizeof plain, "plain_workload");
  path_in(setuid, sizeof setuid, "setuid_workload");
  char *plain_argv[] = {plain, "shares", "1", "0.3", NULL};
  char *setuid_argv[] = {setuid, "shares", "1", "0.3", NULL};
  setup su = {NO_SWITCH, 1};
  CHECK(make_layers(su) == 0);
  outcome o = run_as_nobody(plain_argv, su, "mine");
  if (!o.ran) {
    printf("SKIP test_setuid_preloaded: no private mount namespace with "
           "overlays here\n");
    return;
  }
  char mine[256];
  path_in(mine, sizeof mine, "mine");
  pprof_profile *profiles[4];
  size_t n = read_profiles(mine, profiles, 4, NULL);
  CHECK_EQ_INT(n, 1);
  for (size_t i = 0; i < n; i++) {
    CHECK_EQ_STR(profile_comment(profiles[i], "service"), "x");
    pprof_profile_free(profiles[i]);
  }

  o = run_as_nobody(setuid_argv, su, "drop");
  CHECK(o.ran);
  CHECK(strstr(o.err, "contprof:") == NULL);
  check_untouched("drop");
}

static void cleanup(void) {
  if (dir[0] && !getenv("CP_TEST_KEEP"))
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TEST_MAIN(T(test_setuid_linked), T(test_setuid_preloaded), T(cleanup))
