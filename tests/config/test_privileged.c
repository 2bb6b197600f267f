/* The configuration of a privileged program (setuid, setgid, capabilities:
 * docs/security.md, "Privileged programs"), without being one: what
 * cp_config_load_privileged keeps (the program's own options, the defaults)
 * and what it ignores (every variable, however hostile), and that it says
 * nothing at the default log level. test_setuid checks the real thing as
 * root. */
#include <fcntl.h>
#include <unistd.h>

#include "config.h"
#include "test.h"

/* Loads while capturing stderr into err. */
static int load(cp_config *cfg, const contprof_options *opts, int allowed,
                char *err, size_t errlen) {
  fflush(stderr);
  int saved = dup(2);
  char path[] = "/tmp/cp_privileged_XXXXXX";
  int fd = mkstemp(path);
  dup2(fd, 2);
  int rc = cp_config_load_privileged(cfg, opts, allowed);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  lseek(fd, 0, SEEK_SET);
  ssize_t n = read(fd, err, errlen - 1);
  err[n > 0 ? n : 0] = 0;
  close(fd);
  unlink(path);
  return rc;
}

static void set_hostile_environment(void) {
  setenv("CONTPROF_OUTPUT_DIR", "/tmp/attacker", 1);
  setenv("CONTPROF_SPOOL_DIR", "/tmp/attacker", 1);
  setenv("CONTPROF_SERVICE", "evil", 1);
  setenv("CONTPROF_LOG_LEVEL", "debug", 1);
  setenv("CONTPROF_EXPORT", "pyroscope", 1);
  setenv("PYROSCOPE_SERVER_ADDRESS", "http://attacker.example", 1);
  setenv("PYROSCOPE_AUTH_TOKEN", "stolen", 1);
  setenv("CONTPROF_CPU_HZ", "1000", 1);
  setenv("CONTPROF_ENABLED", "1", 1);
}

/* Not allowed: disabled, and the environment left unread. */
static void test_off_without_switch(void) {
  CHECK_EQ_INT(cp_config_privileged(), 0); /* this test is not setuid */
  set_hostile_environment();
  cp_config cfg;
  char err[4096];
  CHECK_EQ_INT(load(&cfg, NULL, 0, err, sizeof err), 0);
  CHECK_EQ_INT(cfg.enabled, 0);
  CHECK_EQ_INT(cfg.privileged, 1);
  CHECK_EQ_STR(cfg.output_dir, CP_PRIVILEGED_OUTPUT_DIR);
  CHECK_EQ_STR(err, ""); /* info level only; the environment asked debug */
  cp_config_free(&cfg);
}

/* Allowed: the defaults, files only into the fixed directory, named after
 * the executable; still no variable. */
static void test_defaults_with_switch(void) {
  set_hostile_environment();
  cp_config cfg;
  char err[4096];
  CHECK_EQ_INT(load(&cfg, NULL, 1, err, sizeof err), 0);
  CHECK_EQ_INT(cfg.enabled, 1);
  CHECK_EQ_STR(cfg.output_dir, CP_PRIVILEGED_OUTPUT_DIR);
  CHECK_EQ_STR(cfg.service, "test_privileged");
  CHECK_EQ_INT(cfg.exports, CP_EXPORT_FILE);
  CHECK(cfg.spool_dir == NULL);
  CHECK(cfg.pyroscope_token == NULL);
  CHECK_EQ_STR(cfg.pyroscope_url, "http://localhost:4040");
  CHECK_EQ_INT(cfg.cpu_hz, 100);
  CHECK_EQ_INT(cfg.log_level, CP_LOG_WARN);
  CHECK_EQ_STR(err, "");
  cp_config_free(&cfg);
}

/* The program's own options are its author's, not the invoker's: kept. */
static void test_program_options_kept(void) {
  set_hostile_environment();
  contprof_options o = {.service = "passwd-helper",
                        .output_dir = "/var/lib/helper/profiles",
                        .cpu_hz = 50,
                        .tags = "team:security"};
  cp_config cfg;
  char err[4096];
  CHECK_EQ_INT(load(&cfg, &o, 1, err, sizeof err), 0);
  CHECK_EQ_STR(cfg.service, "passwd-helper");
  CHECK_EQ_STR(cfg.output_dir, "/var/lib/helper/profiles");
  CHECK_EQ_INT(cfg.cpu_hz, 50);
  CHECK_EQ_INT(cfg.ntags, 1);
  cp_config_free(&cfg);
}

TEST_MAIN(T(test_off_without_switch), T(test_defaults_with_switch),
          T(test_program_options_kept))
