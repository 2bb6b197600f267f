/* Tests for src/aggregator/symbols.c: real lookups in this test binary, libc,
 * the vdso, C++ code and a library loaded and unloaded at run time, plus
 * corrupt ELF files that must not crash the loader. */
#include "aggregator/symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aggregator/elf_image.h"
#include "aggregator/symbol_scan.h"
#include "common.h"
#include "test.h"

/* From symbols_fixture.cpp. */
uintptr_t fixture_method_pc(void);
uintptr_t fixture_function_template_pc(void);
uintptr_t fixture_class_template_pc(void);

/* A file-local function: only .symtab names it. */
static __attribute__((noinline)) int local_helper(int x) { return x * 7 + 1; }

/* A global function of the test binary. */
__attribute__((noinline)) int symbols_test_exported(int x) { return x * x - 3; }

static int some_data[16]; /* in a writable, non-executable mapping */

static uint64_t pc_of(void (*fn)(void)) { return (uint64_t)(uintptr_t)fn; }
#define PC(fn) pc_of((void (*)(void))(fn))

/* What the dynamic loader says: elf address = pc - load bias. */
static uint64_t expected_elf_address(uint64_t pc) {
  Dl_info info;
  struct link_map *map = NULL;
  if (!dladdr1((void *)(uintptr_t)pc, &info, (void **)&map, RTLD_DL_LINKMAP) ||
      !map)
    return UINT64_MAX;
  return pc - (uint64_t)map->l_addr;
}

static char exe_path[4096];

static const char *test_exe(void) {
  if (!exe_path[0]) {
    ssize_t n = readlink("/proc/self/exe", exe_path, sizeof exe_path - 1);
    exe_path[n > 0 ? n : 0] = '\0';
  }
  return exe_path;
}

static void test_init_is_idempotent(void) {
  CHECK_EQ_INT(cp_symbols_init(), 0);
  CHECK_EQ_INT(cp_symbols_init(), 0);
  CHECK_EQ_INT(cp_symbols_refresh(), 0); /* nothing changed */
}

static void test_static_and_exported_functions(void) {
  int (*volatile fn)(int) = local_helper;
  CHECK_EQ_INT(fn(2), 15);
  CHECK_EQ_INT(symbols_test_exported(3), 6);

  cp_symbol s;
  uint64_t pc = PC(local_helper);
  CHECK_EQ_INT(cp_symbols_lookup(pc, &s), 0);
  CHECK_EQ_STR(s.function, "local_helper");
  CHECK(s.mapping != NULL);
  if (s.mapping) {
    CHECK_EQ_STR(s.mapping->path, test_exe());
    CHECK(pc >= s.mapping->start && pc < s.mapping->limit);
  }
  CHECK_EQ_INT(s.elf_address, expected_elf_address(pc));

  /* A pc inside the function, not just its first byte. */
  CHECK_EQ_INT(cp_symbols_lookup(pc + 1, &s), 0);
  CHECK_EQ_STR(s.function, "local_helper");

  pc = PC(symbols_test_exported);
  CHECK_EQ_INT(cp_symbols_lookup(pc, &s), 0);
  CHECK_EQ_STR(s.function, "symbols_test_exported");
  CHECK_EQ_INT(s.elf_address, expected_elf_address(pc));
}

static void test_cxx_names_are_demangled(void) {
  cp_symbol s;
  CHECK_EQ_INT(cp_symbols_lookup(fixture_method_pc(), &s), 0);
  CHECK_EQ_STR(s.function, "fixture::Widget::spin(int)");
  CHECK_EQ_INT(cp_symbols_lookup(fixture_function_template_pc(), &s), 0);
  CHECK_EQ_STR(s.function, "int fixture::twice<int>(int)");
  CHECK_EQ_INT(cp_symbols_lookup(fixture_class_template_pc(), &s), 0);
  CHECK_EQ_STR(s.function, "fixture::Box<long>::get() const");
  /* The cached demangled name is handed out again. */
  const char *first = s.function;
  CHECK_EQ_INT(cp_symbols_lookup(fixture_class_template_pc(), &s), 0);
  CHECK(s.function == first);
}

static void test_libc_function(void) {
  uint64_t pc = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "getpid");
  CHECK(pc != 0);
  cp_symbol s;
  CHECK_EQ_INT(cp_symbols_lookup(pc, &s), 0);
  CHECK(s.function && strstr(s.function, "getpid"));
  CHECK(s.mapping && strstr(s.mapping->path, "libc"));
  CHECK(s.mapping && strlen(s.mapping->build_id) >= 16);
  CHECK_EQ_INT(s.elf_address, expected_elf_address(pc));
}

/* Every sized function libc exports, looked up at its start, middle and
 * last byte: the same name each time (the search between two entries of
 * the table's page index must find what a search of the whole table
 * finds). Its list from `nm -D`, independent of our reader. */
static void test_every_libc_export_whole(void) {
  Dl_info info;
  struct link_map *map = NULL;
  void *getpid_fn = dlsym(RTLD_DEFAULT, "getpid");
  CHECK(getpid_fn &&
        dladdr1(getpid_fn, &info, (void **)&map, RTLD_DL_LINKMAP) && map);
  if (!map)
    return;
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "nm -D --defined-only -S '%s' 2>/dev/null",
           info.dli_fname);
  FILE *nm = popen(cmd, "r");
  CHECK(nm != NULL);
  if (!nm)
    return;
  char line[512];
  int checked = 0, differ = 0;
  while (fgets(line, sizeof line, nm)) {
    unsigned long long addr, size;
    char type, name[400];
    if (sscanf(line, "%llx %llx %c %399s", &addr, &size, &type, name) != 4 ||
        (type != 'T' && type != 'W') || size < 2)
      continue;
    uint64_t pc = (uint64_t)map->l_addr + addr;
    uint64_t at[3] = {pc, pc + size / 2, pc + size - 1};
    char first[512] = "";
    int same = 1;
    for (int i = 0; i < 3; i++) {
      cp_symbol s;
      if (cp_symbols_lookup(at[i], &s) != 0 || !s.function) {
        same = 0;
        break;
      }
      if (i == 0)
        snprintf(first, sizeof first, "%s", s.function);
      else if (strcmp(first, s.function) != 0)
        same = 0;
    }
    checked++;
    if (!same && differ++ < 5)
      printf("  %s (%llu bytes): not one name over its bytes\n", name, size);
  }
  pclose(nm);
  printf("  %d libc functions looked up, %d differ\n", checked, differ);
  CHECK(checked > 1000);
  CHECK_EQ_INT(differ, 0);
}

static void test_pc_in_no_mapping(void) {
  cp_symbol s;
  CHECK_EQ_INT(cp_symbols_lookup(16, &s), -1);
  CHECK(s.mapping == NULL);
  CHECK(s.function == NULL);
  CHECK_EQ_INT(cp_symbols_lookup((uint64_t)(uintptr_t)&some_data[3], &s), -1);
  CHECK(s.mapping == NULL);
  CHECK_EQ_INT(cp_symbols_lookup(UINT64_MAX - 4096, &s), -1);
  CHECK(s.mapping == NULL);
}

/* The build id readelf reports for the test binary. */
static int readelf_build_id(char *out, size_t size) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "readelf -n '%s' 2>/dev/null", test_exe());
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  char line[512];
  int found = -1;
  while (fgets(line, sizeof line, p)) {
    const char *at = strstr(line, "Build ID: ");
    if (at && found != 0) {
      snprintf(out, size, "%s", at + strlen("Build ID: "));
      out[strcspn(out, " \r\n")] = '\0';
      found = 0;
    }
  }
  pclose(p);
  return found;
}

static void test_build_id_matches_readelf(void) {
  char expected[256];
  if (readelf_build_id(expected, sizeof expected) != 0) {
    fprintf(stderr, "skip: readelf -n gives no build id for %s\n", test_exe());
    return;
  }
  cp_symbol s;
  cp_symbols_lookup(PC(local_helper), &s);
  CHECK(s.mapping != NULL);
  if (s.mapping)
    CHECK_EQ_STR(s.mapping->build_id, expected);
}

static void test_vdso(void) {
  uint64_t base = getauxval(AT_SYSINFO_EHDR);
  if (!base) {
    fprintf(stderr, "skip: no vdso\n");
    return;
  }
  cp_symbol s;
  cp_symbols_lookup(base, &s);
  CHECK(s.mapping != NULL);
  if (!s.mapping)
    return;
  CHECK_EQ_STR(s.mapping->path, "[vdso]");
  /* Some pc of the image must be its clock_gettime or gettimeofday. */
  int found = 0;
  const cp_mapping *m = s.mapping;
  for (uint64_t pc = m->start; pc < m->limit && !found; pc += 4) {
    if (cp_symbols_lookup(pc, &s) == 0)
      found = strstr(s.function, "clock_gettime") ||
              strstr(s.function, "gettimeofday");
  }
  CHECK(found);
}

/* A library this process has not loaded yet, and one of its functions. */
static void *load_fresh_library(const char **name, const char **function) {
  static const char *const candidates[][2] = {
      {"libz.so.1", "zlibVersion"},
      {"libbz2.so.1.0", "BZ2_bzlibVersion"},
      {"liblzma.so.5", "lzma_version_string"},
      {"libexpat.so.1", "XML_ExpatVersion"},
      {"libm.so.6", "cos"},
  };
  for (size_t i = 0; i < CP_ARRAY_SIZE(candidates); i++) {
    void *h = dlopen(candidates[i][0], RTLD_NOW | RTLD_NOLOAD);
    if (h) {
      dlclose(h);
      continue;
    }
    h = dlopen(candidates[i][0], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      *name = candidates[i][0];
      *function = candidates[i][1];
      return h;
    }
  }
  return NULL;
}

static void test_dlopen_and_dlclose(void) {
  CHECK_EQ_INT(cp_symbols_init(), 0);
  cp_symbols_refresh();
  const char *lib, *function;
  void *h = load_fresh_library(&lib, &function);
  if (!h) {
    fprintf(stderr, "skip: no library left to load\n");
    return;
  }
  uint64_t pc = (uint64_t)(uintptr_t)dlsym(h, function);
  CHECK(pc != 0);

  /* Not yet known: the lookup itself notices the new library. */
  cp_symbol s;
  CHECK_EQ_INT(cp_symbols_lookup(pc, &s), 0);
  CHECK_EQ_STR(s.function, function);
  CHECK(s.mapping && strstr(s.mapping->path, lib));
  CHECK_EQ_INT(s.elf_address, expected_elf_address(pc));
  CHECK_EQ_INT(cp_symbols_refresh(), 1); /* a mapping appeared */
  CHECK_EQ_INT(cp_symbols_refresh(), 0);
  if (!s.mapping)
    return;
  const cp_mapping *m = s.mapping;
  const char *name = s.function;
  char path[4096];
  snprintf(path, sizeof path, "%s", m->path);
  cp_symbols_mark_used(m, 7);
  CHECK_EQ_INT(m->last_used_generation, 7);
  cp_symbols_mark_used(m, 5); /* never goes back */
  CHECK_EQ_INT(m->last_used_generation, 7);

  dlclose(h);
  if ((h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD)) != NULL) {
    dlclose(h);
    fprintf(stderr, "skip: %s stayed loaded after dlclose\n", lib);
    return;
  }
  CHECK_EQ_INT(cp_symbols_refresh(), 1);
  CHECK_EQ_INT(cp_symbols_refresh(), 0);
  /* The unloaded mapping's record stays readable until collected. */
  CHECK_EQ_STR(m->path, path);
  CHECK_EQ_STR(name, function);
  /* A sample taken before the unload still resolves, to the retired
   * record. */
  CHECK_EQ_INT(cp_symbols_lookup(pc, &s), 0);
  CHECK(s.mapping == m);
  CHECK_EQ_STR(s.function, function);
  cp_symbols_collect(7); /* generation 7 still uses it */
  CHECK_EQ_STR(m->path, path);
  CHECK_EQ_STR(name, function);
  cp_symbols_collect(8); /* frees it: m and name are dangling from here */
}

static void test_lookups_after_reset_and_in_forked_child(void) {
  cp_symbols_reset();
  cp_symbol s;
  CHECK_EQ_INT(cp_symbols_lookup(PC(local_helper), &s), 0); /* lazy init */
  CHECK_EQ_STR(s.function, "local_helper");

  fflush(NULL); /* the child must not repeat buffered output */
  pid_t child = fork();
  if (child == 0) {
    cp_symbols_reset();
    int ok = cp_symbols_lookup(PC(symbols_test_exported), &s) == 0 &&
             strcmp(s.function, "symbols_test_exported") == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  CHECK(child > 0 && waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static uint64_t thread_pcs[4]; /* filled before the threads start */

static void *lookup_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 2000; i++) {
    cp_symbol s;
    cp_symbols_lookup(thread_pcs[i % CP_ARRAY_SIZE(thread_pcs)], &s);
    if (i % 4 == 0 && (!s.function || strcmp(s.function, "local_helper")))
      return (void *)1;
  }
  return NULL;
}

static void test_concurrent_lookups(void) {
  thread_pcs[0] = PC(local_helper);
  thread_pcs[1] = fixture_method_pc();
  thread_pcs[2] = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "getpid");
  thread_pcs[3] = 16;
  pthread_t threads[4];
  for (size_t i = 0; i < CP_ARRAY_SIZE(threads); i++)
    CHECK_EQ_INT(pthread_create(&threads[i], NULL, lookup_thread, NULL), 0);
  for (int i = 0; i < 200; i++) {
    cp_symbols_refresh();
    cp_symbols_collect((uint64_t)i);
  }
  for (size_t i = 0; i < CP_ARRAY_SIZE(threads); i++) {
    void *result = (void *)1;
    pthread_join(threads[i], &result);
    CHECK(result == NULL);
  }
}

/* ---- Corrupt files ------------------------------------------------------- */

static unsigned char *read_whole(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = n > 0 ? malloc((size_t)n) : NULL;
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *size = buf ? (size_t)n : 0;
  return buf;
}

static void write_whole(const char *path, const void *data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0);
  if (fd < 0)
    return;
  CHECK_EQ_INT(write(fd, data, size), (long long)size);
  close(fd);
}

static size_t scans_compared; /* damaged files a scan named */

/* Resolves in a damaged copy; only surviving matters. Returns the result. */
static int resolve_damaged(const char *path, const void *data, size_t size,
                           uint64_t elf_address) {
  char function[256], build_id[256];
  write_whole(path, data, size);
  int rc = cp_symbols_resolve_file(path, elf_address, function, sizeof function,
                                   build_id, sizeof build_id);
  CHECK(rc == 0 || function[0] == '\0');
  CHECK(strlen(build_id) <= 128);
  /* A scan of the damaged file names it as its table does, or leaves it
   * to the table. */
  char *scanned = NULL;
  int known = 0;
  if (cp_symbols_scan_file(path, &elf_address, 1, &scanned, &known) == 0 &&
      known) {
    CHECK_EQ_INT(scanned != NULL, rc == 0);
    if (scanned && rc == 0)
      CHECK(strncmp(scanned, function, sizeof function - 1) == 0);
    scans_compared++;
  }
  free(scanned);
  return rc;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) { /* xorshift64: a fixed, reproducible sequence */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void test_corrupt_elf_files(void) {
  char dir[] = "/tmp/contprof_symbols_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256];
  snprintf(path, sizeof path, "%s/corrupt.so", dir);
  char function[256], build_id[256];

  CHECK_EQ_INT(cp_symbols_resolve_file("/nonexistent/lib.so", 0x1000, function,
                                       sizeof function, build_id,
                                       sizeof build_id),
               -1);
  CHECK_EQ_INT(cp_symbols_resolve_file("/dev/null", 0x1000, function,
                                       sizeof function, build_id,
                                       sizeof build_id),
               -1);
  CHECK_EQ_INT(cp_symbols_resolve_file(dir, 0x1000, function, sizeof function,
                                       build_id, sizeof build_id),
               -1);

  unsigned char garbage[4096];
  for (size_t i = 0; i < sizeof garbage; i++)
    garbage[i] = (unsigned char)rng();
  CHECK_EQ_INT(resolve_damaged(path, garbage, 0, 0x1000), -1);
  CHECK_EQ_INT(resolve_damaged(path, garbage, sizeof garbage, 0x1000), -1);
  memcpy(garbage, ELFMAG, SELFMAG);
  CHECK_EQ_INT(resolve_damaged(path, garbage, 7, 0x1000), -1);
  CHECK_EQ_INT(resolve_damaged(path, garbage, sizeof garbage, 0x1000), -1);

  size_t size;
  unsigned char *pristine = read_whole(test_exe(), &size);
  CHECK(pristine != NULL && size > sizeof(ElfW(Ehdr)));
  if (!pristine)
    return;
  cp_symbol s;
  cp_symbols_lookup(PC(local_helper), &s);
  uint64_t addr = s.elf_address;
  /* The intact copy resolves, so the damaged ones test something. */
  CHECK_EQ_INT(resolve_damaged(path, pristine, size, addr), 0);
  CHECK_EQ_INT(cp_symbols_resolve_file(path, addr, function, sizeof function,
                                       build_id, sizeof build_id),
               0);
  CHECK_EQ_STR(function, "local_helper");
  CHECK(s.mapping && strcmp(build_id, s.mapping->build_id) == 0);

  size_t cuts[] = {16, 64, 65, 200, 4096, size / 2, size - 64, size - 1};
  for (size_t i = 0; i < CP_ARRAY_SIZE(cuts); i++)
    if (cuts[i] < size)
      resolve_damaged(path, pristine, cuts[i], addr);

  unsigned char *copy = malloc(size);
  ElfW(Ehdr) eh;
  memcpy(&eh, pristine, sizeof eh);
  uint64_t shdrs_at = eh.e_shoff,
           shdrs_len = (uint64_t)eh.e_shnum * sizeof(ElfW(Shdr));
  /* Targeted damage: every field of every section header set to hostile
   * values, one field at a time. */
  static const uint64_t hostile[] = {0,           1,          0xffff,
                                     0xffffffffu, UINT64_MAX, UINT64_MAX / 2};
  for (uint64_t at = shdrs_at; at + 8 <= shdrs_at + shdrs_len && at + 8 <= size;
       at += 4) {
    memcpy(copy, pristine, size);
    uint64_t v = hostile[rng() % CP_ARRAY_SIZE(hostile)];
    memcpy(copy + at, &v, sizeof v);
    resolve_damaged(path, copy, size, addr);
  }
  /* Random damage to the headers, the section table and anywhere. */
  for (int iter = 0; iter < 300; iter++) {
    memcpy(copy, pristine, size);
    int flips = 1 + (int)(rng() % 8);
    for (int f = 0; f < flips; f++) {
      uint64_t at;
      switch (rng() % 3) {
      case 0: /* ELF and program headers */
        at = rng() % (sizeof eh + (uint64_t)eh.e_phnum * sizeof(ElfW(Phdr)));
        break;
      case 1:
        at = shdrs_len ? shdrs_at + rng() % shdrs_len : 0;
        break;
      default:
        at = rng() % size;
      }
      if (at < size)
        copy[at] = (unsigned char)rng();
    }
    resolve_damaged(path, copy, size, addr);
  }
  free(copy);
  free(pristine);
  unlink(path);
  rmdir(dir);
  printf("%zu damaged copies named by a scan as by their table\n",
         scans_compared);
  CHECK(scans_compared > 100);
}

/* A stripped copy with a .gnu_debuglink finds its symbols in the debug file. */
static void test_debuglink(void) {
  char dir[] = "/tmp/contprof_debuglink_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char cmd[16384], stripped[256], debug[256];
  snprintf(stripped, sizeof stripped, "%s/stripped", dir);
  snprintf(debug, sizeof debug, "%s/stripped.debug", dir);
  snprintf(cmd, sizeof cmd,
           "objcopy --only-keep-debug '%s' '%s' 2>/dev/null && "
           "objcopy --strip-all --add-gnu-debuglink='%s' '%s' '%s' "
           "2>/dev/null",
           test_exe(), debug, debug, test_exe(), stripped);
  if (system(cmd) != 0) {
    fprintf(stderr, "skip: objcopy failed or is missing\n");
  } else {
    cp_symbol s;
    cp_symbols_lookup(PC(local_helper), &s);
    char function[256], build_id[256];
    CHECK_EQ_INT(cp_symbols_resolve_file(stripped, s.elf_address, function,
                                         sizeof function, build_id,
                                         sizeof build_id),
                 0);
    CHECK_EQ_STR(function, "local_helper");
    unlink(debug);      /* without it the static function is unknown */
    cp_symbols_reset(); /* the table read with it is kept until then */
    CHECK_EQ_INT(cp_symbols_resolve_file(stripped, s.elf_address, function,
                                         sizeof function, build_id,
                                         sizeof build_id),
                 -1);
  }
  unlink(stripped);
  unlink(debug);
  rmdir(dir);
}

/* ---- the symbol budget (issue #15, item 7) --------------------------------
 */

typedef struct budget_module {
  const char *lib, *function; /* lib NULL: this test binary */
  uint64_t pc;
} budget_module;

/* Heap bytes in use: what the tables really take, whatever symbols.c
 * counts. */
static size_t heap_in_use(void) { return mallinfo2().uordblks; }

/* Resolves every module's function once per round, each lookup in a new
 * generation that is then the only live one (as the aggregator does
 * period by period). Returns the most heap in use above `base` after any
 * lookup; *named counts lookups that found the right name. */
static size_t resolve_rounds(budget_module *mods, size_t n, int rounds,
                             size_t base, size_t *named) {
  static uint64_t gen = 100;
  size_t peak = 0;
  *named = 0;
  for (int r = 0; r < rounds; r++)
    for (size_t i = 0; i < n; i++) {
      cp_symbol s;
      int rc = cp_symbols_lookup(mods[i].pc, &s);
      if (rc == 0 && s.function && strstr(s.function, mods[i].function))
        ++*named;
      cp_symbols_mark_used(s.mapping, gen);
      cp_symbols_collect(++gen); /* that generation is exported */
      size_t used = heap_in_use();
      if (used > base && used - base > peak)
        peak = used - base;
    }
  return peak;
}

/* Symbol tables (sections up to 512 MiB each) were kept for good, however
 * many modules were resolved. With a budget of half what all the tables of
 * a dozen libraries take, the heap stays within it (plus the mapping
 * records), every lookup still finds its function (tables no live
 * generation uses are dropped, least recently used first, and read again),
 * and a budget smaller than a table gives module+offset, not a crash. */
static void test_tables_stay_within_budget(void) {
  static budget_module mods[] = {
      {NULL, "local_helper", 0},
      {"libc.so.6", "getpid", 0},
      {"libstdc++.so.6", "__cxa_demangle", 0},
      {"libm.so.6", "cos", 0},
      {"libz.so.1", "zlibVersion", 0},
      {"liblzma.so.5", "lzma_version_string", 0},
      {"libbz2.so.1.0", "BZ2_bzlibVersion", 0},
      {"libexpat.so.1", "XML_ExpatVersion", 0},
      {"libsqlite3.so.0", "sqlite3_libversion", 0},
      {"libcrypto.so.3", "OpenSSL_version", 0},
      {"libcurl.so.4", "curl_version", 0},
  };
  void *handles[CP_ARRAY_SIZE(mods)] = {0};
  size_t n = 0;
  for (size_t i = 0; i < CP_ARRAY_SIZE(mods); i++) {
    uint64_t pc = PC(local_helper);
    if (mods[i].lib) {
      handles[i] = dlopen(mods[i].lib, RTLD_NOW | RTLD_LOCAL);
      void *fn = handles[i] ? dlsym(handles[i], mods[i].function) : NULL;
      if (!fn)
        continue;
      pc = (uint64_t)(uintptr_t)fn;
    }
    mods[n] = mods[i];
    mods[n++].pc = pc;
  }
  CHECK(n >= 6);

  /* Unbounded: what the tables take. */
  cp_symbols_set_budget((size_t)1 << 40);
  cp_symbols_reset();
  CHECK_EQ_INT(cp_symbols_init(), 0);
  malloc_trim(0);
  size_t base = heap_in_use(), named;
  size_t all = resolve_rounds(mods, n, 1, base, &named);
  size_t counted_all = cp_symbols_memory_used();
  CHECK_EQ_INT(named, n);

  /* Half of that: still every name, within the budget. */
  /* Measured, whatever symbols.c counts (sanitizers' allocators keep
   * mallinfo at 0: then counted). */
  size_t budget = (all ? all : counted_all) / 2;
  cp_symbols_set_budget(budget);
  cp_symbols_reset();
  CHECK_EQ_INT(cp_symbols_init(), 0);
  malloc_trim(0);
  base = heap_in_use();
  size_t peak = resolve_rounds(mods, n, 3, base, &named);
  printf("%zu modules: tables %zu kB (heap +%zu kB) unbounded; budget %zu "
         "kB: heap peak +%zu kB, counted %zu kB, %zu of %zu lookups named\n",
         n, counted_all >> 10, all >> 10, budget >> 10, peak >> 10,
         cp_symbols_memory_used() >> 10, named, 3 * n);
  CHECK(cp_symbols_memory_used() <= budget);
  /* The mapping records and /proc/self/maps reading come on top. */
  CHECK(all == 0 || peak <= budget + (256 << 10));
  CHECK_EQ_INT(named, 3 * n);

  /* Smaller than any table: module+offset, nothing kept. */
  cp_symbols_set_budget(4096);
  cp_symbols_reset();
  cp_symbol s;
  CHECK_EQ_INT(cp_symbols_lookup(PC(local_helper), &s), -1);
  CHECK(s.mapping != NULL);
  CHECK(s.function == NULL);
  CHECK(cp_symbols_memory_used() <= 4096);

  cp_symbols_set_budget(CP_SYMBOLS_DEFAULT_BUDGET);
  cp_symbols_reset();
  for (size_t i = 0; i < CP_ARRAY_SIZE(handles); i++)
    if (handles[i])
      dlclose(handles[i]);
}

/* ---- Scans against tables ------------------------------------------------ */

static int u64_cmp(const void *pa, const void *pb) {
  uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
  return a < b ? -1 : a > b;
}

/* Appends addresses around every function symbol of r's sections of type
 * `type` (its start, the next byte, its middle, last byte, end, the byte
 * after, a page later), every `stride`-th symbol. */
static void add_symbol_addresses(const cp_elf_reader *r, uint32_t type,
                                 size_t stride, uint64_t **v, size_t *n,
                                 size_t *cap) {
  for (size_t i = 0; i < r->shnum; i++) {
    cp_elf_symbols t;
    if (r->shdrs[i].sh_type != type ||
        cp_elf_symbols_of(r, &r->shdrs[i], &t) != 0)
      continue;
    for (uint64_t k = 0; k < t.count; k += stride) {
      cp_elf_sym sym;
      if (cp_elf_read(r, t.symtab->sh_offset + k * sizeof sym, sizeof sym,
                      &sym) != 0 ||
          !cp_elf_is_function(&t, &sym))
        continue;
      uint64_t a = sym.st_value, z = sym.st_size;
      uint64_t around[] = {a,     a + 1,     a + z / 2, a + z - 1,
                           a + z, a + z + 1, a + 4096};
      if (*n + CP_ARRAY_SIZE(around) > *cap) {
        *cap = *cap ? *cap * 2 : 4096;
        *v = realloc(*v, *cap * sizeof **v);
      }
      for (size_t j = 0; j < CP_ARRAY_SIZE(around); j++)
        (*v)[(*n)++] = around[j];
    }
  }
}

/* Names addresses around the functions of path (and of its debug file) by
 * scans and by its table, and checks that every address a scan names is
 * named the same by the table. Returns how many it compared; *undecided:
 * how many the scans left to the table. */
static size_t compare_scans(const char *path, size_t stride,
                            size_t *undecided) {
  *undecided = 0;
  struct stat st;
  int fd = open(path, O_RDONLY);
  if (fd < 0 || fstat(fd, &st) != 0)
    return 0;
  cp_elf_reader r = {.fd = fd, .size = (uint64_t)st.st_size}, dbg;
  uint64_t *v = NULL;
  size_t n = 0, cap = 0;
  if (cp_elf_open(&r) == 0) {
    char build_id[CP_ELF_BUILD_ID_LEN];
    cp_elf_build_id(&r, build_id);
    cp_own_fd own;
    if (cp_elf_open_debug(&r, path, build_id, &dbg, &own)) {
      add_symbol_addresses(&dbg, SHT_SYMTAB, stride, &v, &n, &cap);
      cp_elf_close_debug(&dbg, &own);
    }
    add_symbol_addresses(&r, SHT_SYMTAB, stride, &v, &n, &cap);
    add_symbol_addresses(&r, SHT_DYNSYM, stride, &v, &n, &cap);
  }
  cp_elf_close(&r);
  close(fd);
  if (n)
    qsort(v, n, sizeof *v, u64_cmp);
  size_t d = 0;
  for (size_t i = 0; i < n; i++)
    if (d == 0 || v[d - 1] != v[i])
      v[d++] = v[i];
  size_t compared = 0, differ = 0;
  char *names[256];
  int known[256];
  for (size_t at = 0; at < d; at += 256) {
    size_t k = d - at < 256 ? d - at : 256;
    if (cp_symbols_scan_file(path, v + at, k, names, known) != 0) {
      CHECK(!"the scan reads the file");
      break;
    }
    for (size_t i = 0; i < k; i++) {
      char table[4096], id[256];
      int rc = cp_symbols_resolve_file(path, v[at + i], table, sizeof table, id,
                                       sizeof id);
      if (!known[i]) {
        (*undecided)++;
      } else {
        compared++;
        const char *scan = names[i] ? names[i] : "";
        if ((rc == 0) != (names[i] != NULL) ||
            strncmp(scan, table, sizeof table - 1) != 0) {
          if (differ++ < 5)
            printf("%s: %#llx: scan \"%s\", table \"%s\"\n", path,
                   (unsigned long long)v[at + i], scan, table);
        }
      }
      free(names[i]);
    }
  }
  CHECK_EQ_INT(differ, 0);
  free(v);
  return compared;
}

/* What a short-lived process names by scanning its objects' symbol
 * sections (its tables put off) is what their tables name: around every
 * function of this binary, libc (its debug file's .symtab when installed)
 * and, when present, GCC's cc1 (.dynsym only, 28,000 C++ functions). */
static void test_scans_name_as_tables(void) {
  Dl_info info;
  struct link_map *map = NULL;
  CHECK(dladdr1((void *)(uintptr_t)&printf, &info, (void **)&map,
                RTLD_DL_LINKMAP) != 0);
  const char *files[] = {test_exe(), map ? map->l_name : "",
                         "/usr/lib/gcc/x86_64-linux-gnu/12/cc1"};
  size_t strides[] = {1, 1, 7};
  for (size_t i = 0; i < CP_ARRAY_SIZE(files); i++) {
    if (access(files[i], R_OK) != 0) {
      printf("skip %s: not here\n", files[i]);
      continue;
    }
    size_t undecided;
    size_t compared = compare_scans(files[i], strides[i], &undecided);
    printf("%s: %zu addresses named by scans as by the table, %zu left to "
           "the table\n",
           files[i], compared, undecided);
    CHECK(compared > 500);
    CHECK(undecided * 20 < compared); /* the scan decides nearly all */
  }
  cp_symbols_reset();
}

/* A small ELF file of random function symbols over two sections: sizes 0,
 * small, spanning others and huge; aliases of every rank; names tied,
 * empty and past the string table's end; local, global and weak. */
static size_t random_symbols_elf(unsigned char *buf, size_t cap) {
  static const char pool[] = "\0f\0_f\0__f\0g\0_g\0a_b\0___x\0f\0zz\0";
  const size_t pool_names[] = {0, 1, 3, 6, 10, 12, 15, 19, 24, 26};
  size_t nsyms = 2 + rng() % 40;
  ElfW(Ehdr) eh = {0};
  ElfW(Shdr) sh[6] = {{0}};
  static const char shstr[] = "\0.text\0.symtab\0.strtab\0.shstrtab\0.text2";
  size_t off = sizeof eh;
  size_t sym_off = off, sym_len = (nsyms + 1) * sizeof(ElfW(Sym));
  size_t str_off = sym_off + sym_len, str_len = sizeof pool;
  size_t shstr_off = str_off + str_len;
  size_t sh_off = (shstr_off + sizeof shstr + 7) & ~(size_t)7;
  size_t total = sh_off + sizeof sh;
  if (total > cap)
    return 0;
  memset(buf, 0, total);
  memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_ehsize = sizeof eh;
  eh.e_shoff = sh_off;
  eh.e_shentsize = sizeof(ElfW(Shdr));
  eh.e_shnum = 6;
  eh.e_shstrndx = 4;
  memcpy(buf, &eh, sizeof eh);
  sh[1] = (ElfW(Shdr)){.sh_name = 1,
                       .sh_type = SHT_PROGBITS,
                       .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
                       .sh_addr = 0x1000,
                       .sh_size = 0x300};
  sh[2] = (ElfW(Shdr)){.sh_name = 7,
                       .sh_type = SHT_SYMTAB,
                       .sh_offset = sym_off,
                       .sh_size = sym_len,
                       .sh_link = 3,
                       .sh_entsize = sizeof(ElfW(Sym))};
  sh[3] = (ElfW(Shdr)){.sh_name = 15,
                       .sh_type = SHT_STRTAB,
                       .sh_offset = str_off,
                       .sh_size = str_len};
  sh[4] = (ElfW(Shdr)){.sh_name = 23,
                       .sh_type = SHT_STRTAB,
                       .sh_offset = shstr_off,
                       .sh_size = sizeof shstr};
  sh[5] = (ElfW(Shdr)){.sh_name = 33,
                       .sh_type = SHT_PROGBITS,
                       .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
                       .sh_addr = 0x1300,
                       .sh_size = 0x80};
  memcpy(buf + sh_off, sh, sizeof sh);
  memcpy(buf + str_off, pool, str_len);
  memcpy(buf + shstr_off, shstr, sizeof shstr);
  static const unsigned char binds[] = {STB_LOCAL, STB_GLOBAL, STB_WEAK};
  for (size_t i = 1; i <= nsyms; i++) {
    ElfW(Sym) sym = {0};
    uint64_t r = rng();
    sym.st_value = 0x1000 + (r >> 8) % 0x3a0; /* past .text2 too */
    static const uint64_t sizes[] = {0, 0, 0, 1, 4, 16, 48, 0x120, 1ull << 33};
    sym.st_size = sizes[(r >> 20) % CP_ARRAY_SIZE(sizes)];
    sym.st_info = ELF64_ST_INFO(binds[(r >> 28) % 3],
                                (r >> 32) % 9 ? STT_FUNC : STT_NOTYPE);
    sym.st_shndx = (r >> 36) % 4 ? 1 : 5;
    sym.st_name = (r >> 40) % 13 ? pool_names[(r >> 44) % 10]
                                 : (uint32_t)(str_len - 1 + (r >> 48) % 3);
    memcpy(buf + sym_off + i * sizeof sym, &sym, sizeof sym);
  }
  return total;
}

/* Random symbol tables: every address a scan names, from below the first
 * symbol to past the last, is named as the table names it, and the scans
 * leave some to the table (nested symbols) without naming them wrong. */
static void test_scans_of_random_tables(void) {
  char dir[] = "/tmp/contprof_scan_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256];
  snprintf(path, sizeof path, "%s/random.so", dir);
  unsigned char buf[8192];
  size_t compared = 0, undecided = 0, named = 0, differ = 0;
  for (int iter = 0; iter < 300; iter++) {
    size_t size = random_symbols_elf(buf, sizeof buf);
    CHECK(size > 0);
    write_whole(path, buf, size);
    cp_symbols_reset(); /* no table of an earlier file under this name */
    uint64_t addrs[256];
    for (uint64_t base = 0xff8; base < 0x1400; base += 256) {
      for (size_t i = 0; i < 256; i++)
        addrs[i] = base + i;
      char *names[256];
      int known[256];
      CHECK_EQ_INT(cp_symbols_scan_file(path, addrs, 256, names, known), 0);
      for (size_t i = 0; i < 256; i++) {
        char function[256];
        int rc = cp_symbols_resolve_file(path, addrs[i], function,
                                         sizeof function, NULL, 0);
        if (!known[i]) {
          undecided++;
        } else {
          compared++;
          named += names[i] != NULL;
          if ((rc == 0) != (names[i] != NULL) ||
              (names[i] && strcmp(names[i], function) != 0)) {
            if (differ++ < 5)
              printf("iteration %d, %#llx: scan \"%s\", table \"%s\"\n", iter,
                     (unsigned long long)addrs[i],
                     names[i] ? names[i] : "(none)",
                     rc == 0 ? function : "(none)");
          }
        }
        free(names[i]);
      }
    }
  }
  printf("random tables: %zu addresses named by scans as by the table (%zu "
         "with a name), %zu left to the table, %zu differ\n",
         compared, named, undecided, differ);
  CHECK_EQ_INT(differ, 0);
  CHECK(named > compared / 4);
  CHECK(undecided > 0);
  cp_symbols_reset();
  unlink(path);
  rmdir(dir);
}

static int refuse_builds(uint64_t estimate_ns, uint64_t spent_ns) {
  (void)estimate_ns;
  (void)spent_ns;
  return 0;
}

static int allow_builds(uint64_t estimate_ns, uint64_t spent_ns) {
  (void)estimate_ns;
  (void)spent_ns;
  return 1;
}

/* With every table put off (a short process over the cap), lookups and
 * batches name the process's own functions and libc's by scans, the same
 * names as the tables give; once the gate allows the tables, the names
 * stay the same. */
static void test_put_off_tables_name_by_scans(void) {
  uint64_t pcs[] = {PC(local_helper),
                    PC(symbols_test_exported),
                    PC(getpid),
                    PC(printf),
                    PC(qsort),
                    PC(local_helper) + 4,
                    PC(fixture_method_pc),
                    (uint64_t)fixture_method_pc()};
  enum { N = sizeof pcs / sizeof pcs[0] };
  char *want[N];
  cp_symbols_reset();
  for (size_t i = 0; i < N; i++) {
    cp_symbol s;
    cp_symbols_lookup(pcs[i], &s);
    want[i] = s.function ? strdup(s.function) : NULL;
  }
  CHECK(want[0] && strcmp(want[0], "local_helper") == 0);

  cp_symbols_set_build_gate(refuse_builds);
  cp_symbols_reset();
  uint64_t scans = cp_symbols_scans();
  for (size_t i = 0; i < N; i++) { /* one at a time */
    cp_symbol s;
    cp_symbols_lookup(pcs[i], &s);
    CHECK((s.function == NULL) == (want[i] == NULL));
    if (s.function && want[i])
      CHECK_EQ_STR(s.function, want[i]);
  }
  CHECK(cp_symbols_scans() > scans);

  cp_symbols_reset(); /* in batches, by mapping */
  for (size_t i = 0; i < N; i++) {
    cp_symbol s;
    cp_symbols_lookup_cached(pcs[i], &s);
    CHECK(s.mapping != NULL);
    if (!s.mapping)
      continue;
    uint64_t same[N];
    size_t k = 0, at[N];
    for (size_t j = 0; j < N; j++) {
      cp_symbol t;
      cp_symbols_lookup_cached(pcs[j], &t);
      if (t.mapping == s.mapping) {
        at[k] = j;
        same[k++] = pcs[j];
      }
    }
    const char *names[N];
    cp_symbols_lookup_batch(s.mapping, same, k, names);
    for (size_t j = 0; j < k; j++) {
      CHECK((names[j] == NULL) == (want[at[j]] == NULL));
      if (names[j] && want[at[j]])
        CHECK_EQ_STR(names[j], want[at[j]]);
    }
  }

  cp_symbols_set_build_gate(allow_builds); /* the tables, after the scans */
  for (size_t i = 0; i < N; i++) {
    cp_symbol s;
    cp_symbols_lookup(pcs[i] + 1, &s); /* new addresses: no range holds */
    cp_symbol t;
    cp_symbols_lookup(pcs[i], &t);
    CHECK((t.function == NULL) == (want[i] == NULL));
    if (t.function && want[i])
      CHECK_EQ_STR(t.function, want[i]);
  }
  cp_symbols_set_build_gate(NULL);
  cp_symbols_reset();
  for (size_t i = 0; i < N; i++)
    free(want[i]);
}

/* ---- PLT stubs ----------------------------------------------------------- */

/* The IFUNC symbols of path's dynamic table at value (readelf's list):
 * whether name is one of them. */
static int is_ifunc_at(const char *path, unsigned long long value,
                       const char *name) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "readelf --dyn-syms -W '%s' 2>/dev/null", path);
  FILE *p = popen(cmd, "r");
  if (!p)
    return 0;
  char line[1024];
  int found = 0;
  while (fgets(line, sizeof line, p)) {
    unsigned long long v;
    char type[32], sym[512];
    if (sscanf(line, " %*[0-9]: %llx %*s %31s %*s %*s %*s %511s", &v, type,
               sym) != 3 ||
        strcmp(type, "IFUNC") != 0 || v != value)
      continue;
    char *at = strchr(sym, '@'); /* the version */
    if (at)
      *at = '\0';
    found |= strcmp(sym, name) == 0;
  }
  pclose(p);
  return found;
}

/* The PLT stubs of path as objdump names them (binutils' synthetic
 * symbols: a reader independent of ours), against the table
 * (cp_symbols_resolve_file) and a scan (cp_symbols_scan_file): the same
 * name for each stub's first and last byte. Where objdump says
 * "*ABS*+0xADDR@plt" (an IRELATIVE slot), ours is an IFUNC symbol of the
 * file at ADDR. Returns the stubs compared. */
static int check_plt(const char *path) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd,
           "objdump -d -C -j .plt -j .plt.sec -j .plt.got '%s' 2>/dev/null",
           path);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL);
  if (!p)
    return 0;
  static char line[4200], want[CP_SCAN_MAX][1024];
  int compared = 0, wrong = 0;
  uint64_t addrs[CP_SCAN_MAX];
  size_t n = 0;
  for (;;) {
    char *got = fgets(line, sizeof line, p);
    unsigned long long addr;
    /* "ADDRESS <LABEL>:", the label demangled (C++ names hold '>') */
    char *open = got ? strchr(line, '<') : NULL;
    char *close = open ? strstr(open, ">:\n") : NULL;
    size_t len = close ? (size_t)(close - open - 1) : 0;
    if (sscanf(line, "%llx", &addr) == 1 && len > 4 && len < sizeof want[0] &&
        strncmp(close - 4, "@plt", 4) == 0) {
      addrs[n] = addr;
      snprintf(want[n], sizeof want[n], "%.*s", (int)len, open + 1);
      n++;
    }
    if (n == CP_SCAN_MAX || (!got && n > 0)) {
      char *scanned[CP_SCAN_MAX];
      int known[CP_SCAN_MAX];
      CHECK_EQ_INT(cp_symbols_scan_file(path, addrs, n, scanned, known), 0);
      for (size_t i = 0; i < n; i++) {
        char name[4200] = "", last[4200] = "";
        cp_symbols_resolve_file(path, addrs[i], name, sizeof name, NULL, 0);
        /* The stub's last byte: every entry is 8 or 16 bytes. */
        cp_symbols_resolve_file(path, addrs[i] + 7, last, sizeof last, NULL, 0);
        unsigned long long abs_addr;
        int ok = strcmp(name, want[i]) == 0;
        if (!ok && sscanf(want[i], "*ABS*+0x%llx@plt", &abs_addr) == 1) {
          size_t k = strlen(name);
          if (k > 4 && strcmp(name + k - 4, "@plt") == 0) {
            name[k - 4] = '\0';
            ok = is_ifunc_at(path, abs_addr, name);
            name[k - 4] = '@';
          }
        }
        ok = ok && strcmp(name, last) == 0 && known[i] && scanned[i] &&
             strcmp(scanned[i], name) == 0;
        if (!ok && wrong++ < 5)
          printf("  %s: %#llx objdump %s, table %s (last byte %s), scan %s\n",
                 path, (unsigned long long)addrs[i], want[i], name, last,
                 scanned[i] ? scanned[i] : "-");
        free(scanned[i]);
        compared++;
      }
      n = 0;
    }
    if (!got)
      break;
  }
  pclose(p);
  printf("  %s: %d stubs as objdump names them, %d wrong\n", path, compared,
         wrong);
  CHECK_EQ_INT(wrong, 0);
  return compared;
}

static void test_plt_stubs_are_named(void) {
  Dl_info info;
  void *getpid_fn = dlsym(RTLD_DEFAULT, "getpid");
  CHECK(getpid_fn && dladdr(getpid_fn, &info));
  if (system("objdump --version >/dev/null 2>&1") != 0) {
    printf("  skipped: no objdump (binutils)\n");
    return;
  }
  CHECK(check_plt(test_exe()) >= 3);
  CHECK(check_plt(info.dli_fname) >= 20); /* libc: IRELATIVE slots */
  /* C++: the names demangled, "@plt" after them. */
  void *cxxlib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
  void *demangle_fn = cxxlib ? dlsym(cxxlib, "__cxa_demangle") : NULL;
  Dl_info cxx;
  CHECK(demangle_fn && dladdr(demangle_fn, &cxx));
  if (demangle_fn && dladdr(demangle_fn, &cxx))
    CHECK(check_plt(cxx.dli_fname) >= 100);
  CHECK(check_plt(CP_BUILD_DIR "/tests/plt_nopie") >= 3);
  CHECK(check_plt(CP_BUILD_DIR "/tests/plt_ibt") >= 3);

  /* The IBT object's lazy entries in .plt (after the resolver's), which
   * objdump does not name: each is named after what its .rela.plt entry
   * fills, a function its .plt.sec stub jumps to. */
  FILE *p = popen("readelf -SW '" CP_BUILD_DIR "/tests/plt_ibt' | "
                  "sed -n 's/.* \\.plt  *PROGBITS  *\\([0-9a-f]*\\) "
                  "[0-9a-f]* \\([0-9a-f]*\\) .*/\\1 \\2/p'",
                  "r");
  unsigned long long lo = 0, size = 0;
  CHECK(p && fscanf(p, "%llx %llx", &lo, &size) == 2);
  if (p)
    pclose(p);
  int lazy = 0, entries = 0;
  for (unsigned long long a = lo + 16; a + 16 <= lo + size; a += 16) {
    char name[4200] = "", grep[4400];
    entries++;
    if (cp_symbols_resolve_file(CP_BUILD_DIR "/tests/plt_ibt", a, name,
                                sizeof name, NULL, 0) != 0 ||
        strlen(name) > 200)
      continue;
    snprintf(grep, sizeof grep,
             "objdump -d -j .plt.sec '" CP_BUILD_DIR
             "/tests/plt_ibt' | grep -q '<%s>:'",
             name);
    lazy += system(grep) == 0;
  }
  printf("  %d of the IBT object's %d lazy entries named\n", lazy, entries);
  CHECK(entries >= 3);
  CHECK_EQ_INT(lazy, entries);

  /* In this process, through its mapping: the stub of a call this binary
   * makes (getpid, called through its PLT below). */
  char cmd[4200];
  snprintf(cmd, sizeof cmd,
           "objdump -d -j .plt -j .plt.sec -j .plt.got '%s' | "
           "grep '<getpid@plt>:'",
           test_exe());
  p = popen(cmd, "r");
  unsigned long long stub = 0;
  CHECK(p && fscanf(p, "%llx", &stub) == 1);
  if (p)
    pclose(p);
  uint64_t bias = (uint64_t)(uintptr_t)PC(test_static_and_exported_functions) -
                  expected_elf_address(PC(test_static_and_exported_functions));
  cp_symbol s;
  CHECK_EQ_INT(cp_symbols_lookup(bias + stub, &s), 0);
  CHECK(s.function && strcmp(s.function, "getpid@plt") == 0);
  CHECK_EQ_INT(s.elf_address, stub);
  CHECK(getpid() > 0); /* the call that has the stub */
}

static void test_reset_frees_everything(void) { cp_symbols_reset(); }

TEST_MAIN(T(test_init_is_idempotent), T(test_static_and_exported_functions),
          T(test_cxx_names_are_demangled), T(test_libc_function),
          T(test_every_libc_export_whole), T(test_pc_in_no_mapping),
          T(test_build_id_matches_readelf), T(test_vdso),
          T(test_dlopen_and_dlclose),
          T(test_lookups_after_reset_and_in_forked_child),
          T(test_concurrent_lookups), T(test_corrupt_elf_files),
          T(test_debuglink), T(test_tables_stay_within_budget),
          T(test_scans_name_as_tables), T(test_scans_of_random_tables),
          T(test_put_off_tables_name_by_scans), T(test_plt_stubs_are_named),
          T(test_reset_frees_everything))
