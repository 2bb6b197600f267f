/* Config parsing: defaults, fallbacks between CONTPROF_*, DD_* and PYROSCOPE_*
 * variables, option precedence, and one clear message plus a safe fallback for
 * every bad value. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "config.h"
#include "test.h"

typedef struct fake_env {
  const char *pairs[32][2];
} fake_env;

static const char *fake_get(const char *name, void *ctx) {
  fake_env *e = ctx;
  for (int i = 0; i < 32 && e->pairs[i][0]; i++)
    if (strcmp(e->pairs[i][0], name) == 0)
      return e->pairs[i][1];
  return NULL;
}

/* Loads cfg from env while capturing what went to stderr. */
static int load(cp_config *cfg, const contprof_options *opts, fake_env *env,
                char *err, size_t errlen) {
  fflush(stderr);
  int saved = dup(2);
  char path[] = "/tmp/cp_config_XXXXXX";
  int fd = mkstemp(path);
  dup2(fd, 2);
  int rc = cp_config_load(cfg, opts, fake_get, env);
  dup2(saved, 2);
  close(saved);
  lseek(fd, 0, SEEK_SET);
  ssize_t n = read(fd, err, errlen - 1);
  err[n > 0 ? n : 0] = 0;
  close(fd);
  unlink(path);
  return rc;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++)
    n += *s == '\n';
  return n;
}

static void test_defaults(void) {
  fake_env env = {{{0}}};
  cp_config cfg;
  char err[4096];
  CHECK_EQ_INT(load(&cfg, NULL, &env, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK(cfg.enabled);
  CHECK_EQ_STR(cfg.service, program_invocation_short_name);
  CHECK_EQ_STR(cfg.env, "");
  CHECK_EQ_STR(cfg.version, "");
  CHECK_EQ_INT(cfg.ntags, 0);
  CHECK_EQ_INT(cfg.profiles, CP_PROFILE_CPU);
  CHECK_EQ_INT(cfg.cpu_hz, 100);
  CHECK_EQ_INT(cfg.wall_interval_ms, 50); /* async-profiler's */
  CHECK_EQ_INT(cfg.wall_threads_per_tick, 16);
  CHECK_EQ_INT(cfg.max_frames, 128);
  CHECK_EQ_INT(cfg.upload_period_s, 60);
  /* Relative directories are taken from the working directory at the
   * start: a later chdir (a daemon's) does not move them. */
  char cwd[4096], want[4200];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  snprintf(want, sizeof want, "%s/profiles", cwd);
  CHECK_EQ_STR(cfg.output_dir, want);
  CHECK_EQ_INT(cfg.log_level, CP_LOG_WARN);
  CHECK_EQ_INT(cfg.max_memory_bytes, 64u << 20);
  CHECK_EQ_INT(cfg.symbols_max_bytes, 128u << 20);
  CHECK(cfg.max_overhead_pct == 2.0);
  CHECK_EQ_INT(cfg.kernel_cost_after_ms, 10000);
  cp_config_free(&cfg);
}

static void test_all_variables(void) {
  fake_env env = {{{"CONTPROF_SERVICE", "checkout"},
                   {"CONTPROF_ENV", "prod"},
                   {"CONTPROF_VERSION", "1.2.3"},
                   {"CONTPROF_TAGS", "team:payments,region:eu-west-1"},
                   {"CONTPROF_PROFILES", "cpu, wall,heap"},
                   {"CONTPROF_CPU_HZ", "250"},
                   {"CONTPROF_MAX_FRAMES", "64"},
                   {"CONTPROF_UPLOAD_PERIOD", "10"},
                   {"CONTPROF_OUTPUT_DIR", "/var/tmp/p"},
                   {"CONTPROF_LOG_LEVEL", "error"},
                   {"CONTPROF_MAX_MEMORY_MB", "8"},
                   {"CONTPROF_SYMBOLS_MAX_MB", "16"},
                   {"CONTPROF_MAX_OVERHEAD_PCT", "0.5"},
                   {"CONTPROF_ENABLED", "true"}}};
  cp_config cfg;
  char err[4096];
  CHECK_EQ_INT(load(&cfg, NULL, &env, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_STR(cfg.service, "checkout");
  CHECK_EQ_STR(cfg.env, "prod");
  CHECK_EQ_STR(cfg.version, "1.2.3");
  CHECK_EQ_INT(cfg.ntags, 2);
  if (cfg.ntags == 2) {
    CHECK_EQ_STR(cfg.tags[0].key, "team");
    CHECK_EQ_STR(cfg.tags[0].value, "payments");
    CHECK_EQ_STR(cfg.tags[1].key, "region");
    CHECK_EQ_STR(cfg.tags[1].value, "eu-west-1");
  }
  CHECK_EQ_INT(cfg.profiles,
               CP_PROFILE_CPU | CP_PROFILE_WALL | CP_PROFILE_HEAP);
  CHECK_EQ_INT(cfg.cpu_hz, 250);
  CHECK_EQ_INT(cfg.max_frames, 64);
  CHECK_EQ_INT(cfg.upload_period_s, 10);
  CHECK_EQ_STR(cfg.output_dir, "/var/tmp/p");
  CHECK_EQ_INT(cfg.log_level, CP_LOG_ERROR);
  CHECK_EQ_INT(cfg.max_memory_bytes, 8u << 20);
  CHECK_EQ_INT(cfg.symbols_max_bytes, 16u << 20);
  CHECK(cfg.max_overhead_pct == 0.5);
  cp_config_free(&cfg);
  cp_log_set_level(CP_LOG_WARN);
}

static void test_datadog_and_pyroscope_fallbacks(void) {
  fake_env env = {{{"DD_SERVICE", "dd-svc"},
                   {"PYROSCOPE_APPLICATION_NAME", "pyro-app"},
                   {"DD_ENV", "staging"},
                   {"DD_VERSION", "9"},
                   {"DD_TAGS", "a:1 b:2"}}};
  cp_config cfg;
  char err[4096];
  CHECK_EQ_INT(load(&cfg, NULL, &env, err, sizeof err), 0);
  CHECK_EQ_STR(cfg.service, "dd-svc");
  CHECK_EQ_STR(cfg.env, "staging");
  CHECK_EQ_STR(cfg.version, "9");
  CHECK_EQ_INT(cfg.ntags, 2);
  cp_config_free(&cfg);

  fake_env pyro = {{{"PYROSCOPE_APPLICATION_NAME", "pyro-app"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &pyro, err, sizeof err), 0);
  CHECK_EQ_STR(cfg.service, "pyro-app");
  cp_config_free(&cfg);

  fake_env clocks = {{{"CONTPROF_CPU_CLOCK", "posix"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &clocks, err, sizeof err), 0);
  CHECK_EQ_INT(cfg.cpu_clock, CP_CPU_CLOCK_POSIX);
  CHECK_EQ_INT(cfg.unwind_mode, 0); /* auto by default */
  cp_config_free(&cfg);

  fake_env unwinders = {{{"CONTPROF_UNWIND", "dwarf"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &unwinders, err, sizeof err), 0);
  CHECK_EQ_INT(cfg.unwind_mode, 2);
  CHECK_EQ_INT(cfg.symbolize_none, 0);      /* local by default */
  CHECK_EQ_INT(cfg.python_reads_direct, 1); /* direct by default */
  cp_config_free(&cfg);

  fake_env choices = {
      {{"CONTPROF_SYMBOLIZE", "none"}, {"CONTPROF_PYTHON_READS", "syscall"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &choices, err, sizeof err), 0);
  CHECK_EQ_INT(cfg.symbolize_none, 1);
  CHECK_EQ_INT(cfg.python_reads_direct, 0);
  cp_config_free(&cfg);

  /* Durations as the Datadog and Pyroscope clients write them. */
  fake_env durations = {{{"PYROSCOPE_UPLOAD_INTERVAL", "1m30s"},
                         {"CONTPROF_EXIT_TIMEOUT", "1.5s"},
                         {"CONTPROF_RETRY_INITIAL", " 250ms "},
                         {"CONTPROF_UPLOAD_TIMEOUT", ".5"},
                         {"CONTPROF_KERNEL_COST_AFTER", "2m"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &durations, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(cfg.kernel_cost_after_ms, 120000);
  CHECK_EQ_INT(cfg.upload_period_s, 90);
  CHECK_EQ_INT(cfg.exit_timeout_ms, 1500);
  CHECK_EQ_INT(cfg.retry_initial_ms, 250);
  CHECK_EQ_INT(cfg.upload_timeout_ms, 500);
  cp_config_free(&cfg);

  /* Directories: relative ones made absolute, others kept. */
  fake_env dirs = {
      {{"CONTPROF_OUTPUT_DIR", "./out/x"}, {"CONTPROF_SPOOL_DIR", "spool"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &dirs, err, sizeof err), 0);
  char cwd[4096], want[4200];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  snprintf(want, sizeof want, "%s/out/x", cwd);
  CHECK_EQ_STR(cfg.output_dir, want);
  snprintf(want, sizeof want, "%s/spool", cwd);
  CHECK_EQ_STR(cfg.spool_dir, want);
  cp_config_free(&cfg);
  fake_env abs_dir = {{{"CONTPROF_OUTPUT_DIR", "/var/tmp/p"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &abs_dir, err, sizeof err), 0);
  CHECK_EQ_STR(cfg.output_dir, "/var/tmp/p");
  cp_config_free(&cfg);

  /* CONTPROF_UPLOAD_PERIOD takes them too (whole seconds). */
  const char *periods[][2] = {
      {"10s", "10"}, {"2m", "120"},      {"1m30s", "90"},   {"45", "45"},
      {"1.4", "1"},  {"86400", "86400"}, {"1h 30m", "5400"}};
  for (size_t i = 0; i < sizeof periods / sizeof *periods; i++) {
    fake_env period = {{{"CONTPROF_UPLOAD_PERIOD", periods[i][0]},
                        {"DD_PROFILING_UPLOAD_PERIOD", "5"}}};
    CHECK_EQ_INT(load(&cfg, NULL, &period, err, sizeof err), 0);
    CHECK_EQ_STR(err, "");
    CHECK_EQ_INT(cfg.upload_period_s, atoi(periods[i][1]));
    cp_config_free(&cfg);
  }

  /* CONTPROF_* wins over DD_*. */
  fake_env both = {{{"CONTPROF_SERVICE", "mine"}, {"DD_SERVICE", "theirs"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &both, err, sizeof err), 0);
  CHECK_EQ_STR(cfg.service, "mine");
  cp_config_free(&cfg);
}

/* Each bad value: exactly one line, naming variable, value and fallback. */
static void check_bad(const char *var, const char *value, const char *fallback,
                      size_t offset, int expected) {
  fake_env env = {{{var, value}}};
  cp_config cfg;
  char err[4096];
  CHECK_EQ_INT(load(&cfg, NULL, &env, err, sizeof err), 0);
  CHECK_EQ_INT(count_lines(err), 1);
  CHECK(strncmp(err, "contprof: ", 10) == 0);
  CHECK(strstr(err, var) != NULL);
  CHECK(strstr(err, value) != NULL);
  if (fallback && !strstr(err, fallback))
    fprintf(stderr, "message lacks fallback '%s': %s", fallback, err);
  CHECK(!fallback || strstr(err, fallback) != NULL);
  CHECK_EQ_INT(*(int *)((char *)&cfg + offset), expected);
  cp_config_free(&cfg);
}

static void test_bad_values(void) {
  check_bad("CONTPROF_CPU_HZ", "abc", "100", offsetof(cp_config, cpu_hz), 100);
  check_bad("CONTPROF_CPU_HZ", "0", "100", offsetof(cp_config, cpu_hz), 100);
  check_bad("CONTPROF_CPU_HZ", "1001", "100", offsetof(cp_config, cpu_hz), 100);
  check_bad("CONTPROF_CPU_HZ", "50x", "100", offsetof(cp_config, cpu_hz), 100);
  check_bad("CONTPROF_CPU_HZ", "99999999999999999999", "100",
            offsetof(cp_config, cpu_hz), 100);
  check_bad("CONTPROF_MAX_FRAMES", "-5", "128", offsetof(cp_config, max_frames),
            128);
  check_bad("CONTPROF_UPLOAD_PERIOD", "0.2s", "60",
            offsetof(cp_config, upload_period_s), 60);
  check_bad("CONTPROF_UPLOAD_PERIOD", "1m30", "60",
            offsetof(cp_config, upload_period_s), 60);
  check_bad("CONTPROF_UPLOAD_PERIOD", "25h", "60",
            offsetof(cp_config, upload_period_s), 60);
  check_bad("CONTPROF_UPLOAD_PERIOD", "5 1s", "60",
            offsetof(cp_config, upload_period_s), 60);
  check_bad("PYROSCOPE_UPLOAD_INTERVAL", "NAN", "60",
            offsetof(cp_config, upload_period_s), 60);
  check_bad("DD_PROFILING_UPLOAD_PERIOD", "inf", "60",
            offsetof(cp_config, upload_period_s), 60);
  check_bad("DD_PROFILING_UPLOAD_PERIOD", "-10s", "60",
            offsetof(cp_config, upload_period_s), 60);
  check_bad("DD_PROFILING_UPLOAD_PERIOD", "0x20", "60",
            offsetof(cp_config, upload_period_s), 60);
  check_bad("CONTPROF_CPU_CLOCK", "fast", "auto",
            offsetof(cp_config, cpu_clock), CP_CPU_CLOCK_AUTO);
  check_bad("CONTPROF_UNWIND", "lbr", "auto", offsetof(cp_config, unwind_mode),
            0);
  check_bad("CONTPROF_SYMBOLIZE", "remote", "local",
            offsetof(cp_config, symbolize_none), 0);
  check_bad("CONTPROF_PYTHON_READS", "mmap", "direct",
            offsetof(cp_config, python_reads_direct), 1);
  check_bad("CONTPROF_ENABLED", "maybe", "true", offsetof(cp_config, enabled),
            1);
  check_bad("CONTPROF_PROFILES", "cpu,gpu", "using cpu",
            offsetof(cp_config, profiles), CP_PROFILE_CPU);
  check_bad("CONTPROF_PROFILES", "bogus", "cpu", offsetof(cp_config, profiles),
            CP_PROFILE_CPU);
  check_bad("CONTPROF_LOG_LEVEL", "loud", "warn",
            offsetof(cp_config, log_level), CP_LOG_WARN);
  cp_log_set_level(CP_LOG_WARN);

  cp_config cfg;
  char err[4096];
  /* strtoull alone negates a sign after blanks: " -5" was 2^64 - 5. */
  const char *spools[] = {" -5", "+5", "5 MiB x", "0", "99999999999GiB"};
  for (size_t i = 0; i < sizeof spools / sizeof *spools; i++) {
    fake_env spool = {{{"CONTPROF_SPOOL_MAX", spools[i]}}};
    CHECK_EQ_INT(load(&cfg, NULL, &spool, err, sizeof err), 0);
    CHECK_EQ_INT(count_lines(err), 1);
    CHECK(strstr(err, "using 32 profiles") != NULL);
    CHECK_EQ_INT(cfg.spool_max_profiles, 32);
    CHECK_EQ_INT(cfg.spool_max_bytes, 64 << 20);
    cp_config_free(&cfg);
  }
  fake_env spool = {{{"CONTPROF_SPOOL_MAX", " 5 MiB"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &spool, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(cfg.spool_max_bytes, 5 << 20);
  cp_config_free(&cfg);

  /* A list of any length is read whole: 63 times "cpu," then "wall,alloc"
   * (the last two were cut off at 255 bytes). */
  char many[512] = "";
  for (int i = 0; i < 63; i++)
    strcat(many, "cpu,");
  strcat(many, "wall,alloc");
  fake_env long_list = {
      {{"CONTPROF_PROFILES", many}, {"CONTPROF_EXPORT", many + 200}}};
  CHECK_EQ_INT(load(&cfg, NULL, &long_list, err, sizeof err), 0);
  CHECK_EQ_INT(cfg.profiles,
               CP_PROFILE_CPU | CP_PROFILE_WALL | CP_PROFILE_ALLOC);
  CHECK_EQ_INT(count_lines(err), 1); /* the sinks: none of them is one */
  CHECK(strstr(err, "CONTPROF_EXPORT") != NULL);
  cp_config_free(&cfg);

  /* The overhead cap: a percentage, else one line and the default. */
  const char *caps[] = {"abc", "-1", "101",  "nan", "1%", "inf",
                        "2,5", " ",  "0x10", "1e1", "+1", "."};
  for (size_t i = 0; i < sizeof caps / sizeof *caps; i++) {
    fake_env cap = {{{"CONTPROF_MAX_OVERHEAD_PCT", caps[i]}}};
    CHECK_EQ_INT(load(&cfg, NULL, &cap, err, sizeof err), 0);
    CHECK_EQ_INT(count_lines(err), 1);
    CHECK(strstr(err, "CONTPROF_MAX_OVERHEAD_PCT") && strstr(err, "using 2"));
    CHECK(cfg.max_overhead_pct == 2.0);
    cp_config_free(&cfg);
  }
  fake_env off = {{{"CONTPROF_MAX_OVERHEAD_PCT", " 0 "}}};
  CHECK_EQ_INT(load(&cfg, NULL, &off, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK(cfg.max_overhead_pct == 0);
  cp_config_free(&cfg);

  /* The kernel-cost measurement: a duration or off, else one line and the
   * default. */
  fake_env kc_off = {{{"CONTPROF_KERNEL_COST_AFTER", "off"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &kc_off, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(cfg.kernel_cost_after_ms, -1);
  cp_config_free(&cfg);

  /* Words (choices, booleans, off) in any case, with blanks around them,
   * as CONTPROF_LOG_LEVEL and CONTPROF_EXPORT always took them. */
  fake_env words = {{{"CONTPROF_KERNEL_COST_AFTER", " OFF"},
                     {"CONTPROF_CPU_CLOCK", "POSIX"},
                     {"CONTPROF_UNWIND", "Fp "},
                     {"CONTPROF_ENABLED", "true "},
                     {"CONTPROF_TIMELINE", " Yes"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &words, err, sizeof err), 0);
  CHECK_EQ_STR(err, "");
  CHECK_EQ_INT(cfg.kernel_cost_after_ms, -1);
  CHECK_EQ_INT(cfg.cpu_clock, CP_CPU_CLOCK_POSIX);
  CHECK_EQ_INT(cfg.unwind_mode, 1);
  CHECK_EQ_INT(cfg.enabled, 1);
  CHECK_EQ_INT(cfg.timeline, 1);
  cp_config_free(&cfg);
  const char *kcs[] = {"soon", "-1s", "25h", "offf"};
  for (size_t i = 0; i < sizeof kcs / sizeof *kcs; i++) {
    fake_env kc = {{{"CONTPROF_KERNEL_COST_AFTER", kcs[i]}}};
    CHECK_EQ_INT(load(&cfg, NULL, &kc, err, sizeof err), 0);
    CHECK_EQ_INT(count_lines(err), 1);
    CHECK(strstr(err, "CONTPROF_KERNEL_COST_AFTER") &&
          strstr(err, "using 10000ms") && strstr(err, "or off"));
    CHECK_EQ_INT(cfg.kernel_cost_after_ms, 10000);
    cp_config_free(&cfg);
  }

  fake_env tags = {{{"CONTPROF_TAGS", "good:1,bad,:novalue,ok:2"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &tags, err, sizeof err), 0);
  CHECK_EQ_INT(count_lines(err), 1);
  CHECK(strstr(err, "CONTPROF_TAGS") != NULL);
  CHECK_EQ_INT(cfg.ntags, 2);
  cp_config_free(&cfg);
}

static void test_disabled(void) {
  fake_env env = {{{"CONTPROF_ENABLED", "0"}}};
  cp_config cfg;
  char err[4096];
  CHECK_EQ_INT(load(&cfg, NULL, &env, err, sizeof err), 0);
  CHECK_EQ_INT(cfg.enabled, 0);
  cp_config_free(&cfg);
  fake_env dd = {{{"DD_PROFILING_ENABLED", "false"}}};
  CHECK_EQ_INT(load(&cfg, NULL, &dd, err, sizeof err), 0);
  CHECK_EQ_INT(cfg.enabled, 0);
  cp_config_free(&cfg);
}

static void test_options_win(void) {
  fake_env env = {{{"CONTPROF_SERVICE", "env-svc"}, {"CONTPROF_CPU_HZ", "50"}}};
  contprof_options opts = {
      .service = "opt-svc", .cpu_hz = 200, .profiles = "cpu,lock"};
  cp_config cfg;
  char err[4096];
  CHECK_EQ_INT(load(&cfg, &opts, &env, err, sizeof err), 0);
  CHECK_EQ_STR(cfg.service, "opt-svc");
  CHECK_EQ_INT(cfg.cpu_hz, 200);
  CHECK_EQ_INT(cfg.profiles, CP_PROFILE_CPU | CP_PROFILE_LOCK);
  cp_config_free(&cfg);

  /* A bad explicit option is the programmer's error: it is refused. */
  contprof_options bad = {.cpu_hz = 5000};
  CHECK_EQ_INT(load(&cfg, &bad, &env, err, sizeof err), CONTPROF_ERR_INVALID);
  contprof_options bad_profiles = {.profiles = "cpu,nope"};
  CHECK_EQ_INT(load(&cfg, &bad_profiles, &env, err, sizeof err),
               CONTPROF_ERR_INVALID);
}

TEST_MAIN(T(test_defaults), T(test_all_variables),
          T(test_datadog_and_pyroscope_fallbacks), T(test_bad_values),
          T(test_disabled), T(test_options_win))
