/* DWARF lines (src/aggregator/dwarf.c) on inline_workload, a -O2 -g program
 * with two always-inlined helpers: inline chains from the object's own
 * sections (DWARF 5 and 4, compressed too), from a .gnu_debuglink file and
 * from a build-id tree; a truncated or foreign debug file gives no lines,
 * one message and no crash; the memory cap holds. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aggregator/dwarf.h"
#include "test.h"

#define BIN CP_BUILD_DIR "/tests/inline_workload"
#define BIN4 CP_BUILD_DIR "/tests/inline_workload_dwarf4"

static char tmp[64];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int rc = system(cmd);
  if (rc != 0)
    fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
  return rc;
}

/* driver's address range in bin, from nm. */
static int driver_range(const char *bin, uint64_t *lo, uint64_t *hi) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "nm -S %s | grep ' driver'", bin);
  FILE *p = popen(cmd, "r");
  unsigned long long a = 0, size = 0;
  int ok = p && fscanf(p, "%llx %llx", &a, &size) == 2;
  if (p)
    pclose(p);
  *lo = a;
  *hi = a + size;
  return ok ? 0 : -1;
}

/* Which helpers show up inlined into driver over driver's addresses: bit 0
 * heavy_mix, bit 1 light_mix; each with a line and driver's call line. */
static int helpers_seen(const char *path, const char *build_id,
                        const char *bin_for_range) {
  uint64_t lo, hi;
  if (driver_range(bin_for_range, &lo, &hi) != 0)
    return -1;
  cp_line_chain *c = malloc(sizeof *c);
  int seen = 0;
  cp_dwarf_object obj = {.path = path, .build_id = build_id};
  for (uint64_t a = lo; a < hi; a++) {
    if (cp_dwarf_lookup(&obj, a, c) < 2)
      continue;
    if (strcmp(c->frames[1].function, "driver") != 0 ||
        c->frames[0].line <= 0 || c->frames[1].line <= 0 ||
        !strstr(c->frames[0].file, "inline_workload.c"))
      continue;
    if (strcmp(c->frames[0].function, "heavy_mix") == 0)
      seen |= 1;
    if (strcmp(c->frames[0].function, "light_mix") == 0)
      seen |= 2;
  }
  free(c);
  return seen;
}

static int count_messages(const char *file) {
  FILE *f = fopen(file, "r");
  char line[1024];
  int n = 0;
  while (f && fgets(line, sizeof line, f))
    n += strstr(line, "contprof:") != NULL;
  if (f)
    fclose(f);
  return n;
}

/* Runs fn with stderr in a file; returns the contprof: lines written. */
static int messages_of(void (*fn)(void *), void *arg) {
  char path[128];
  snprintf(path, sizeof path, "%s/stderr.txt", tmp);
  fflush(stderr);
  int saved = dup(2);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
  fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  return count_messages(path);
}

static void test_own_sections(void) {
  CHECK_EQ_INT(helpers_seen(BIN, "", BIN), 3);
  CHECK_EQ_INT(helpers_seen(BIN4, "", BIN4), 3);
  /* SHF_COMPRESSED .debug_* sections. */
  CHECK_EQ_INT(sh("objcopy --compress-debug-sections=zlib %s %s/z", BIN, tmp),
               0);
  char z[128];
  snprintf(z, sizeof z, "%s/z", tmp);
  CHECK_EQ_INT(helpers_seen(z, "", BIN), 3);
}

static void test_debuglink(void) {
  CHECK_EQ_INT(sh("cd %s && objcopy --only-keep-debug %s prog.debug && "
                  "objcopy --strip-debug --add-gnu-debuglink=prog.debug %s "
                  "prog && mkdir -p sub/.debug && cp prog sub/ && "
                  "mv prog.debug sub/.debug/",
                  tmp, BIN, BIN),
               0);
  char path[128];
  /* prog.debug is in sub/.debug/ now: prog (in tmp) finds none. */
  snprintf(path, sizeof path, "%s/prog", tmp);
  CHECK_EQ_INT(helpers_seen(path, "", BIN), 0);
  snprintf(path, sizeof path, "%s/sub/prog", tmp);
  CHECK_EQ_INT(helpers_seen(path, "", BIN), 3);
}

static void build_id_of(const char *bin, char *out, size_t size) {
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "readelf -n %s | sed -n 's/.*Build ID: *\\([0-9a-f]*\\).*/\\1/p'",
           bin);
  FILE *p = popen(cmd, "r");
  out[0] = 0;
  if (p && fgets(out, (int)size, p))
    out[strcspn(out, "\n")] = 0;
  if (p)
    pclose(p);
}

static void test_build_id_tree(void) {
  char id[160];
  build_id_of(BIN, id, sizeof id);
  CHECK(strlen(id) > 8);
  CHECK_EQ_INT(sh("cd %s && mkdir -p root/.build-id/%.2s && objcopy "
                  "--only-keep-debug %s root/.build-id/%.2s/%s.debug && "
                  "objcopy --strip-debug %s bare",
                  tmp, id, BIN, id, id + 2, BIN),
               0);
  char path[128], root[128];
  snprintf(path, sizeof path, "%s/bare", tmp);
  snprintf(root, sizeof root, "%s/root", tmp);
  cp_dwarf_reset(); /* the module was opened without the tree */
  CHECK_EQ_INT(helpers_seen(path, "", BIN), 0);
  cp_dwarf_reset();
  cp_dwarf_set_debug_root(root);
  CHECK_EQ_INT(helpers_seen(path, id, BIN), 3);
  cp_dwarf_set_debug_root(NULL);
  cp_dwarf_reset();
}

static void lookups(void *arg) {
  const char *path = arg;
  CHECK_EQ_INT(helpers_seen(path, "", BIN), 0);
  CHECK_EQ_INT(helpers_seen(path, "", BIN), 0);
}

static void test_truncated_debug_file(void) {
  /* The debuglink file cut to 3000 bytes: its section data is gone. */
  CHECK_EQ_INT(sh("cd %s && mkdir -p cut && cp sub/prog cut/ && "
                  "head -c 3000 sub/.debug/prog.debug > cut/prog.debug",
                  tmp),
               0);
  char path[128];
  snprintf(path, sizeof path, "%s/cut/prog", tmp);
  CHECK_EQ_INT(messages_of(lookups, path), 1);
  /* Garbage with an ELF header's worth of bytes. */
  CHECK_EQ_INT(sh("cd %s && mkdir -p junk && cp sub/prog junk/ && "
                  "head -c 64 sub/.debug/prog.debug > junk/prog.debug && "
                  "head -c 100000 /dev/urandom >> junk/prog.debug",
                  tmp),
               0);
  snprintf(path, sizeof path, "%s/junk/prog", tmp);
  CHECK_EQ_INT(messages_of(lookups, path), 1);
}

static void foreign(void *arg) {
  cp_line_chain *c = malloc(sizeof *c);
  cp_dwarf_object obj = {.path = BIN, .build_id = arg};
  uint64_t lo, hi;
  driver_range(BIN, &lo, &hi);
  CHECK_EQ_INT(cp_dwarf_lookup(&obj, lo + 0x20, c), 0);
  CHECK_EQ_INT(cp_dwarf_lookup(&obj, lo + 0x30, c), 0);
  free(c);
}

/* The file at the path is not the one loaded (another build id): no lines
 * from it, one message. */
static void test_replaced_file(void) {
  CHECK_EQ_INT(messages_of(foreign, "0123456789abcdef"), 1);
}

static void test_budget(void) {
  cp_dwarf_reset();
  cp_dwarf_set_budget(1024); /* less than the program's debug sections */
  CHECK_EQ_INT(helpers_seen(BIN, "", BIN), 0);
  CHECK(cp_dwarf_memory_used() <= 1024);
  cp_dwarf_reset();
  cp_dwarf_set_budget(CP_DWARF_DEFAULT_BUDGET);
  CHECK_EQ_INT(helpers_seen(BIN, "", BIN), 3);
  size_t used = cp_dwarf_memory_used();
  CHECK(used > 0);
  /* Shrinking the cap closes what no longer fits. */
  cp_dwarf_set_budget(used / 2);
  CHECK(cp_dwarf_memory_used() <= used / 2);
  cp_dwarf_set_budget(CP_DWARF_DEFAULT_BUDGET);
  cp_dwarf_reset();
}

static void setup(void) {
  snprintf(tmp, sizeof tmp, "/tmp/contprof-dwarf-XXXXXX");
  CHECK(mkdtemp(tmp) != NULL);
}

static void cleanup(void) {
  if (!getenv("CP_TEST_KEEP"))
    sh("rm -rf %s", tmp);
}

TEST_MAIN(T(setup), T(test_own_sections), T(test_debuglink),
          T(test_build_id_tree), T(test_truncated_debug_file),
          T(test_replaced_file), T(test_budget), T(cleanup))
