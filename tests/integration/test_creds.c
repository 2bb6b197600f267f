/* A profiled program that changes its user as `setpriv --reuid` does:
 * PR_SET_KEEPCAPS, setresuid, capset to raise its capabilities again, then
 * setresgid and setgroups, which glibc applies to every thread and aborts
 * the process if one thread fails. The profiler's threads follow the
 * application's per-thread changes (src/samplers/creds.h), so the program
 * must exit 0, and afterwards each of its threads, ours included, must hold
 * the same user, groups and capabilities as its main thread: no more. Also
 * setpriv itself, preloaded. Needs root; skipped otherwise. */
#include "harness.h"
#include "test.h"

#define CONTPROF CP_BUILD_DIR "/contprof"
#define WORKLOAD CP_BUILD_DIR "/tests/creds_workload"
#define PRELOAD CP_BUILD_DIR "/libcontprof_preload.so"

static void test_keepcaps_switch_does_not_abort(void) {
  if (geteuid() != 0) {
    printf("SKIP test_keepcaps_switch_does_not_abort: needs root\n");
    return;
  }
  char *dir = make_temp_dir("creds");
  /* Profiles of the process after the switch cannot be written into this
   * root-owned directory; that is said on stderr and is not checked here. */
  char *argv[] = {CONTPROF,   "run", "--profiles", "cpu,wall,alloc,lock",
                  "--output", dir,   "--",         WORKLOAD,
                  NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, NULL, r), 0);
  printf("%s", r->out);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  int threads = -1, profiler = -1, differ = -1, uid = -1;
  const char *line = strstr(r->out, "threads=");
  CHECK(line && sscanf(line, "threads=%d profiler=%d differ=%d uid=%d",
                       &threads, &profiler, &differ, &uid) == 4);
  CHECK(profiler >= 2); /* the aggregator's and the wall timer's at least */
  CHECK_EQ_INT(differ, 0);
  CHECK_EQ_INT(uid, 65534);
  free(r);
  remove_dir(dir);
}

static void test_setpriv_preloaded(void) {
  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) {
    printf("SKIP test_setpriv_preloaded: needs root and setpriv\n");
    return;
  }
  char *argv[] = {"/usr/bin/setpriv",
                  "--reuid=65534",
                  "--regid=65534",
                  "--clear-groups",
                  "/usr/bin/id",
                  "-u",
                  NULL};
  char *dir = make_temp_dir("creds-setpriv");
  char out_env[256];
  snprintf(out_env, sizeof out_env, "CONTPROF_OUTPUT_DIR=%s", dir);
  const char *env[] = {"LD_PRELOAD=" PRELOAD, out_env,
                       "CONTPROF_LOG_LEVEL=error", NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, env, r), 0);
  printf("setpriv: %s", r->out);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  CHECK(strncmp(r->out, "65534", 5) == 0);
  free(r);
  remove_dir(dir);
}

TEST_MAIN(T(test_keepcaps_switch_does_not_abort), T(test_setpriv_preloaded))
