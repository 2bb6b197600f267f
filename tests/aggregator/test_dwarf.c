/* DWARF lines (src/aggregator/dwarf.c) on inline_workload, a -O2 -g program
 * with two always-inlined helpers: inline chains from the object's own
 * sections (DWARF 5 and 4, compressed too), from a .gnu_debuglink file and
 * from a build-id tree; a library replaced on disk; C++ template members
 * demangled; libc's lines from libc6-dbg; a truncated or foreign debug file
 * gives no lines, one message and no crash; the memory cap holds. */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>

#include "aggregator/dwarf.h"
#include "aggregator/dwarf_line.h"
#include "aggregator/symbols.h"
#include "test.h"

#define BIN CP_BUILD_DIR "/tests/inline_workload"
#define BIN4 CP_BUILD_DIR "/tests/inline_workload_dwarf4"
#define BINCXX CP_BUILD_DIR "/tests/inline_workload_cpp"

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

/* The address range of the function matching pattern in bin, from nm. */
static int function_range(const char *bin, const char *pattern, uint64_t *lo,
                          uint64_t *hi) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "nm -S %s | grep '%s'", bin, pattern);
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
static int driver_range(const char *bin, uint64_t *lo, uint64_t *hi) {
  return function_range(bin, " driver", lo, hi);
}

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

/* Opened ahead of any lookup (what a forking parent does for its
 * children): once, and lookups find it open; never while half the cap is
 * used, so that it cannot evict a module an export is about to read. */
static void test_prepare(void) {
  cp_dwarf_reset();
  cp_dwarf_set_budget(CP_DWARF_DEFAULT_BUDGET);
  cp_dwarf_object bin = {.path = BIN, .build_id = ""};
  cp_dwarf_object bin4 = {.path = BIN4, .build_id = ""};
  CHECK_EQ_INT(cp_dwarf_prepare(&bin), 1);
  size_t one = cp_dwarf_memory_used();
  CHECK(one > 0);
  CHECK_EQ_INT(cp_dwarf_prepare(&bin), 0); /* tried already */
  CHECK_EQ_INT(cp_dwarf_memory_used(), one);
  CHECK_EQ_INT(helpers_seen(BIN, "", BIN), 3);
  /* A cap of which the open module takes more than half: no more ahead. */
  cp_dwarf_reset();
  cp_dwarf_set_budget(one + one / 2);
  CHECK_EQ_INT(cp_dwarf_prepare(&bin), 1);
  size_t used = cp_dwarf_memory_used();
  CHECK(used > (one + one / 2) / 2);
  CHECK_EQ_INT(cp_dwarf_prepare(&bin4), 0);
  CHECK_EQ_INT(cp_dwarf_memory_used(), used);
  CHECK_EQ_INT(helpers_seen(BIN4, "", BIN4), 3); /* read when looked up */
  cp_dwarf_set_budget(CP_DWARF_DEFAULT_BUDGET);
  cp_dwarf_reset();
}

/* addr2line -C -i -f's chain of one address: "fn:line|fn:line|". */
static void addr2line_chain(const char *bin, uint64_t a, char *out,
                            size_t size) {
  char cmd[1024], fn[1024], loc[1024];
  snprintf(cmd, sizeof cmd, "addr2line -C -i -f -e %s %" PRIx64, bin, a);
  FILE *p = popen(cmd, "r");
  size_t used = 0;
  out[0] = 0;
  while (p && fgets(fn, sizeof fn, p) && fgets(loc, sizeof loc, p)) {
    fn[strcspn(fn, "\n")] = 0;
    char *colon = strrchr(loc, ':');
    used += (size_t)snprintf(out + used, size - used, "%s:%ld|", fn,
                             colon ? strtol(colon + 1, NULL, 10) : 0);
    if (used >= size)
      break;
  }
  if (p)
    pclose(p);
}

/* C++: the inlined member function of a class template carries its
 * demangled name (and its mangled one as system name); every chain equals
 * addr2line -C -i -f's. */
static void test_cxx_template_member(void) {
  uint64_t lo, hi;
  CHECK_EQ_INT(function_range(BINCXX, "cpp_driver", &lo, &hi), 0);
  cp_line_chain *c = malloc(sizeof *c);
  cp_dwarf_object obj = {.path = BINCXX, .build_id = ""};
  int member = 0, compared = 0;
  for (uint64_t a = lo; a < hi; a++) {
    if (cp_dwarf_lookup(&obj, a, c) < 2)
      continue;
    if (strcmp(c->frames[0].function,
               "Accumulator<unsigned long>::mix(long)") == 0 &&
        strncmp(c->frames[0].system_name, "_ZN11AccumulatorImE3mixEl", 25) ==
            0 &&
        c->frames[0].line > 0)
      member++;
    char ours[2048], theirs[2048];
    size_t used = 0;
    ours[0] = 0;
    for (size_t k = 0; k < c->n; k++)
      used +=
          (size_t)snprintf(ours + used, sizeof ours - used, "%s:%" PRId64 "|",
                           c->frames[k].function, c->frames[k].line);
    addr2line_chain(BINCXX, a, theirs, sizeof theirs);
    CHECK_EQ_STR(ours, theirs);
    compared++;
  }
  CHECK(member > 0);
  CHECK(compared > 0);
  free(c);
}

/* libc6-dbg: libc's frames get file:line through the build-id tree. */
static void test_libc_lines(void) {
  cp_symbol sym;
  uint64_t pc = (uint64_t)(uintptr_t)&strtol + 4;
  CHECK_EQ_INT(cp_symbols_lookup(pc, &sym), 0);
  if (!sym.mapping)
    return;
  char debug[512];
  snprintf(debug, sizeof debug, "/usr/lib/debug/.build-id/%.2s/%s.debug",
           sym.mapping->build_id, sym.mapping->build_id + 2);
  if (!strstr(sym.mapping->path, "/libc.so")) {
    printf("SKIP test_libc_lines: strtol is %s's here\n", sym.mapping->path);
    return;
  }
  if (access(debug, R_OK) != 0) {
    printf("SKIP test_libc_lines: no %s (libc6-dbg not installed)\n", debug);
    return;
  }
  cp_line_chain *c = malloc(sizeof *c);
  CHECK(cp_symbols_lines(sym.mapping, pc, c) >= 1);
  if (c->n >= 1) {
    CHECK(c->frames[c->n - 1].line > 0);
    CHECK(strstr(c->frames[c->n - 1].file, ".c") != NULL);
    CHECK(strstr(c->frames[c->n - 1].function, "strtol") != NULL);
  }
  free(c);
}

/* A library replaced on disk after it was loaded (a package upgrade:
 * another file renamed onto its path): its frames keep their ELF names but
 * get no lines from the new file, with one message; the original, still
 * mapped, is what the samples ran. */
static void replaced_lookups(void *arg) {
  const cp_mapping *m = arg;
  cp_line_chain *c = malloc(sizeof *c);
  CHECK_EQ_INT(cp_symbols_lines(m, m->start + 0x10, c), 0);
  CHECK_EQ_INT(cp_symbols_lines(m, m->start + 0x20, c), 0);
  free(c);
}

static void test_library_replaced_on_disk(void) {
  char lib[128], other[128];
  snprintf(lib, sizeof lib, "%s/plugin.so", tmp);
  snprintf(other, sizeof other, "%s/other.so", tmp);
  CHECK_EQ_INT(sh("cp %s/tests/libcp_test_plugin.so %s && cp %s %s",
                  CP_BUILD_DIR, lib, BIN, other),
               0);
  void *h = dlopen(lib, RTLD_NOW);
  CHECK(h != NULL);
  if (!h)
    return;
  void *fn = dlsym(h, "plugin_work");
  cp_symbol sym;
  CHECK_EQ_INT(cp_symbols_lookup((uint64_t)(uintptr_t)fn + 1, &sym), 0);
  CHECK(sym.function && strcmp(sym.function, "plugin_work") == 0);
  CHECK(sym.mapping != NULL);
  if (!sym.mapping)
    return;
  cp_line_chain *c = malloc(sizeof *c);
  /* Before: lines from the library's own DWARF. */
  cp_dwarf_reset();
  CHECK(cp_symbols_lines(sym.mapping, (uint64_t)(uintptr_t)fn + 1, c) >= 1);
  CHECK(c->n >= 1 && c->frames[c->n - 1].line > 0);
  /* Replaced: another ELF file under the same name. */
  CHECK_EQ_INT(rename(other, lib), 0);
  cp_dwarf_reset();
  CHECK_EQ_INT(messages_of(replaced_lookups, (void *)sym.mapping), 1);
  /* The ELF name stays (read when the library was mapped). */
  CHECK_EQ_INT(cp_symbols_lookup((uint64_t)(uintptr_t)fn + 1, &sym), 0);
  CHECK(sym.function && strcmp(sym.function, "plugin_work") == 0);
  free(c);
  cp_dwarf_reset();
}

static int count_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  while (d && readdir(d))
    n++;
  if (d)
    closedir(d);
  return n;
}

/* Open modules hold no descriptor of the profiled process (libdw reads a
 * copy), and at most 32 are open; closed ones reopen when needed. */
static void test_open_modules_bounded(void) {
  cp_dwarf_reset();
  int before = count_fds();
  CHECK_EQ_INT(sh("cd %s && mkdir -p many && for i in $(seq 1 40); do "
                  "cp %s many/w$i; done",
                  tmp, BIN),
               0);
  for (int i = 1; i <= 40; i++) {
    char path[128];
    snprintf(path, sizeof path, "%s/many/w%d", tmp, i);
    CHECK_EQ_INT(helpers_seen(path, "", BIN), 3);
  }
  CHECK_EQ_INT(count_fds(), before);
  /* The first one again, closed by now: reopened. */
  char path[128];
  snprintf(path, sizeof path, "%s/many/w1", tmp);
  cp_dwarf_set_budget(CP_DWARF_DEFAULT_BUDGET);
  CHECK_EQ_INT(helpers_seen(path, "", BIN), 3);
  cp_dwarf_reset();
  CHECK_EQ_INT(count_fds(), before);
}

static const uint8_t *test_section(Elf *elf, const char *name, size_t *size) {
  size_t shstrndx;
  *size = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0)
    return NULL;
  for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn;
       scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    const char *n;
    if (gelf_getshdr(scn, &sh) && (n = elf_strptr(elf, shstrndx, sh.sh_name)) &&
        strcmp(n, name) == 0) {
      Elf_Data *d = elf_getdata(scn, NULL);
      *size = d ? d->d_size : 0;
      return d ? d->d_buf : NULL;
    }
  }
  return NULL;
}

/* Our line-table reader (dwarf_line.c) against libdw's dwarf_getsrclines
 * on every unit of path (at most max_units): the same rows in the same
 * order (address, line, end of sequence, file name) and the same file
 * table. Returns the rows compared. */
static size_t compare_line_tables(const char *path, int max_units) {
  int fd = open(path, O_RDONLY);
  Dwarf *dw = fd >= 0 ? dwarf_begin(fd, DWARF_C_READ) : NULL;
  CHECK(dw != NULL);
  if (!dw) {
    if (fd >= 0)
      close(fd);
    return 0;
  }
  Elf *elf = dwarf_getelf(dw);
  cp_dwline_sections s;
  s.line = test_section(elf, ".debug_line", &s.line_size);
  s.str = test_section(elf, ".debug_str", &s.str_size);
  s.line_str = test_section(elf, ".debug_line_str", &s.line_str_size);
  size_t compared = 0;
  int units = 0;
  Dwarf_CU *cu = NULL;
  Dwarf_Die cudie;
  uint8_t unit_type;
  while (units < max_units &&
         dwarf_get_units(dw, cu, &cu, NULL, &unit_type, &cudie, NULL) == 0) {
    Dwarf_Attribute a;
    Dwarf_Word off;
    Dwarf_Lines *lines;
    Dwarf_Files *files;
    size_t nlines, nfiles;
    uint8_t asz;
    Dwarf_Die d;
    if (dwarf_formudata(dwarf_attr(&cudie, DW_AT_stmt_list, &a), &off) != 0 ||
        dwarf_getsrclines(&cudie, &lines, &nlines) != 0 ||
        dwarf_getsrcfiles(&cudie, &files, &nfiles) != 0 ||
        !dwarf_diecu(&cudie, &d, &asz, NULL))
      continue;
    units++;
    cp_dwline_table t;
    CHECK_EQ_INT(
        cp_dwline_read(&s, off,
                       dwarf_formstring(dwarf_attr(&cudie, DW_AT_comp_dir, &a)),
                       asz, SIZE_MAX, &t),
        0);
    CHECK_EQ_INT(t.nrows, nlines);
    /* A table is never larger than the room it is given: refused. */
    cp_dwline_table small;
    if (t.bytes > 64)
      CHECK_EQ_INT(cp_dwline_read(&s, off, NULL, asz, t.bytes / 2, &small), -2);
    CHECK_EQ_INT(t.nfiles, nfiles);
    char ours[4096];
    for (size_t i = 0; i < nfiles && i < t.nfiles; i++) {
      CHECK_EQ_INT(cp_dwline_file_name(&t, i, ours, sizeof ours), 0);
      CHECK_EQ_STR(ours, dwarf_filesrc(files, i, NULL, NULL));
    }
    for (size_t i = 0; i < nlines && i < t.nrows; i++) {
      Dwarf_Line *l = dwarf_onesrcline(lines, i);
      Dwarf_Addr addr;
      int line;
      bool end;
      dwarf_lineaddr(l, &addr);
      dwarf_lineno(l, &line);
      dwarf_lineendsequence(l, &end);
      if (t.rows[i].addr != addr || (int)t.rows[i].line != line ||
          !(t.rows[i].file & CP_DWLINE_END) != !end) {
        fprintf(stderr,
                "%s: row %zu: ours %" PRIx64 " %u %x, libdw %" PRIx64
                " %d %d\n",
                path, i, t.rows[i].addr, t.rows[i].line, t.rows[i].file, addr,
                line, end);
        CHECK(0);
        break;
      }
      cp_dwline_file_name(&t, t.rows[i].file & ~CP_DWLINE_END, ours,
                          sizeof ours);
      CHECK_EQ_STR(ours, dwarf_linesrc(l, NULL, NULL));
      /* The row of the address as libdw's dwarf_getsrc_die finds it. */
      const cp_dwline_row *r = cp_dwline_find(&t, addr);
      Dwarf_Line *theirs = dwarf_getsrc_die(&cudie, addr);
      CHECK(!r == !theirs);
      if (r && theirs) {
        dwarf_lineno(theirs, &line);
        CHECK_EQ_INT((int)r->line, line);
      }
      compared++;
    }
    cp_dwline_free(&t);
  }
  dwarf_end(dw);
  close(fd);
  return compared;
}

/* DWARF 5 and 4 (GCC's own), compressed sections, C++, DWARF 2 and 3,
 * clang's DWARF 4 and 5, and libc6-dbg's libc (DWARF 5, compressed,
 * strings in .debug_line_str) when installed. */
static void test_line_reader_matches_libdw(void) {
  CHECK(compare_line_tables(BIN, 1000) > 50);
  CHECK(compare_line_tables(BIN4, 1000) > 50);
  CHECK(compare_line_tables(BINCXX, 1000) > 30);
  char z[128];
  snprintf(z, sizeof z, "%s/z", tmp); /* test_own_sections' */
  CHECK(compare_line_tables(z, 1000) > 50);
  /* Older DWARF versions and another compiler (clang: MD5 entries in
   * DWARF 5 file tables), when at hand. */
  static const char *const builds[] = {"gcc -O2 -gdwarf-2", "gcc -O2 -gdwarf-3",
                                       "clang -O2 -gdwarf-4",
                                       "clang -O2 -gdwarf-5"};
  for (size_t i = 0; i < sizeof builds / sizeof builds[0]; i++) {
    char out[128];
    snprintf(out, sizeof out, "%s/lines%zu", tmp, i);
    if (sh("%s -o %s %s/tests/integration/inline_workload.c 2>/dev/null",
           builds[i], out, CP_SOURCE_DIR) != 0) {
      printf("SKIP %s in test_line_reader_matches_libdw\n", builds[i]);
      continue;
    }
    CHECK(compare_line_tables(out, 1000) > 30);
  }
  cp_symbol sym;
  if (cp_symbols_lookup((uint64_t)(uintptr_t)&strtol, &sym) == 0 &&
      sym.mapping && strlen(sym.mapping->build_id) > 2) {
    char debug[512];
    snprintf(debug, sizeof debug, "/usr/lib/debug/.build-id/%.2s/%s.debug",
             sym.mapping->build_id, sym.mapping->build_id + 2);
    if (access(debug, R_OK) == 0)
      CHECK(compare_line_tables(debug, 300) > 1000);
    else
      printf("SKIP libc in test_line_reader_matches_libdw: no %s\n", debug);
  }
}

/* Every field of every frame of a chain, for comparisons. */
static void chain_text(const cp_line_chain *c, char *out, size_t size) {
  size_t used = 0;
  out[0] = 0;
  for (size_t k = 0; k < c->n && used < size; k++) {
    const cp_line_frame *f = &c->frames[k];
    used += (size_t)snprintf(out + used, size - used,
                             "%s|%s|%s:%" PRId64 "|%s:%" PRId64 ";",
                             f->function, f->system_name, f->file, f->line,
                             f->decl_file, f->start_line);
  }
}

/* How many addresses of [lo, hi) have an inline chain in path, each equal
 * to the one in ref; -1 at the first that differs. */
static int same_chains(const char *path, const char *ref, uint64_t lo,
                       uint64_t hi) {
  cp_line_chain *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  cp_dwarf_object pa = {.path = path, .build_id = ""};
  cp_dwarf_object pb = {.path = ref, .build_id = ""};
  int inlined = 0;
  char ta[4096], tb[4096];
  for (uint64_t x = lo; x < hi; x++) {
    cp_dwarf_lookup(&pa, x, a);
    cp_dwarf_lookup(&pb, x, b);
    chain_text(a, ta, sizeof ta);
    chain_text(b, tb, sizeof tb);
    if (strcmp(ta, tb) != 0) {
      fprintf(stderr, "%s %" PRIx64 ": %s\n%s: %s\n", path, x, ta, ref, tb);
      inlined = -1;
      break;
    }
    inlined += a->n >= 2;
  }
  free(a);
  free(b);
  return inlined;
}

static void dwz_lookups(void *arg) {
  const char *path = arg;
  CHECK_EQ_INT(helpers_seen(path, "", BIN), 0);
  CHECK_EQ_INT(helpers_seen(path, "", BIN), 0);
}

/* dwz -m (Debian's -dbgsym files): two copies of a program share a
 * supplementary file that holds the inlined functions and the names
 * (DW_FORM_GNU_ref_alt, DW_FORM_GNU_strp_alt). Found next to the file by
 * its relative .gnu_debugaltlink, then in the build-id tree by its build
 * id, every chain is the one without dwz; without it, no lines and one
 * message (libdw is not left to look for it itself). */
static void test_dwz_supplementary_file(void) {
  if (system("command -v dwz >/dev/null 2>&1") != 0) {
    printf("SKIP test_dwz_supplementary_file: no dwz (scripts/deps test)\n");
    return;
  }
  CHECK_EQ_INT(sh("cd %s && mkdir -p dwz && cp %s dwz/a && cp %s dwz/b && "
                  "cp %s dwz/c1 && cp %s dwz/c2 && cd dwz && "
                  "dwz -m common.debug -M common.debug a b && "
                  "dwz -m cxx.debug -M cxx.debug c1 c2 && "
                  "readelf -wi a | grep -q 'alt indirect string' && "
                  "readelf -wi a | grep -q 'DW_AT_abstract_origin: <alt'",
                  tmp, BIN, BIN, BINCXX, BINCXX),
               0);
  char a[128], c1[128], root[128], id[160], alt[128];
  snprintf(a, sizeof a, "%s/dwz/a", tmp);
  snprintf(c1, sizeof c1, "%s/dwz/c1", tmp);
  uint64_t lo, hi;
  cp_dwarf_reset();
  CHECK_EQ_INT(helpers_seen(a, "", BIN), 3);
  CHECK_EQ_INT(driver_range(BIN, &lo, &hi), 0);
  CHECK(same_chains(a, BIN, lo, hi) > 10);
  CHECK_EQ_INT(function_range(BINCXX, "cpp_driver", &lo, &hi), 0);
  CHECK(same_chains(c1, BINCXX, lo, hi) > 10);
  /* The supplementary file by build id, under another debug root. */
  snprintf(alt, sizeof alt, "%s/dwz/common.debug", tmp);
  build_id_of(alt, id, sizeof id);
  CHECK(strlen(id) > 8);
  snprintf(root, sizeof root, "%s/dwzroot", tmp);
  CHECK_EQ_INT(
      sh("mkdir -p %s/.build-id/%.2s && mv %s %s/.build-id/%.2s/%s.debug", root,
         id, alt, root, id, id + 2),
      0);
  cp_dwarf_reset();
  cp_dwarf_set_debug_root(root);
  CHECK_EQ_INT(helpers_seen(a, "", BIN), 3);
  CHECK_EQ_INT(driver_range(BIN, &lo, &hi), 0);
  CHECK(same_chains(a, BIN, lo, hi) > 10);
  /* The program within the cap, with its supplementary file over it:
   * function names only, one message, the cap held. */
  cp_dwarf_reset();
  cp_dwarf_set_budget(100 << 10);
  CHECK_EQ_INT(messages_of(dwz_lookups, a), 1);
  CHECK(cp_dwarf_memory_used() <= 100 << 10);
  cp_dwarf_set_budget(CP_DWARF_DEFAULT_BUDGET);
  /* Nowhere to be found: function names only, one message. */
  cp_dwarf_reset();
  cp_dwarf_set_debug_root(NULL);
  CHECK_EQ_INT(messages_of(dwz_lookups, a), 1);
  cp_dwarf_reset();
}

/* Hostile objects: copies of the workloads (own DWARF) and of a
 * debuglink file with 1 to 64 random bytes overwritten (seeded), each
 * resolved over the code's addresses: no crash, no hang, whatever libdw
 * makes of them (tests/sanitize runs it under ASan+UBSan). */
static void mutate_and_resolve(const char *src, const char *dst,
                               const char *resolve_path, int rounds) {
  FILE *f = fopen(src, "rb");
  CHECK(f != NULL);
  if (!f)
    return;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  rewind(f);
  unsigned char *orig = malloc((size_t)len), *copy = malloc((size_t)len);
  CHECK(fread(orig, 1, (size_t)len, f) == (size_t)len);
  fclose(f);
  cp_line_chain *c = malloc(sizeof *c);
  for (int r = 0; r < rounds; r++) {
    memcpy(copy, orig, (size_t)len);
    int flips = 1 + rand() % 64;
    for (int k = 0; k < flips; k++)
      copy[rand() % len] = (unsigned char)rand();
    FILE *o = fopen(dst, "wb");
    fwrite(copy, 1, (size_t)len, o);
    fclose(o);
    cp_dwarf_reset();
    cp_dwarf_object obj = {.path = resolve_path, .build_id = ""};
    for (uint64_t a = 0x1000; a < 0x1400; a += 3)
      cp_dwarf_lookup(&obj, a, c);
  }
  free(c);
  free(orig);
  free(copy);
}

static void quiet_mutations(void *arg) {
  (void)arg;
  char dst[128], dbg[128], prog[128];
  srand(12345);
  snprintf(dst, sizeof dst, "%s/mutant", tmp);
  mutate_and_resolve(BIN, dst, dst, 300);
  mutate_and_resolve(BINCXX, dst, dst, 300);
  /* The debuglink file of sub/prog (test_debuglink). */
  snprintf(dbg, sizeof dbg, "%s/sub/.debug/prog.debug", tmp);
  snprintf(prog, sizeof prog, "%s/sub/prog", tmp);
  sh("cp %s %s/pristine.debug", dbg, tmp);
  char pristine[128];
  snprintf(pristine, sizeof pristine, "%s/pristine.debug", tmp);
  mutate_and_resolve(pristine, dbg, prog, 300);
  sh("cp %s %s", pristine, dbg);
  cp_dwarf_reset();
}

static void test_mutated_files(void) {
  /* At most one message per mutant. */
  CHECK(messages_of(quiet_mutations, NULL) <= 900);
}

/* Writes to part a copy of full whose .debug_aranges keeps every other set
 * (the units of the others are then found by their DIEs alone), or none
 * with keep_none. full is src with its debug sections inflated. 0, or -1
 * when a set is 64-bit DWARF (not handled here). */
static int aranges_variant(const char *src, const char *full, const char *part,
                           int keep_none) {
  if (sh("objcopy --decompress-debug-sections %s %s", src, full) != 0)
    return -1;
  if (keep_none)
    return sh("objcopy --remove-section .debug_aranges %s %s", full, part);
  char in[600], out[600];
  snprintf(in, sizeof in, "%s/aranges.bin", tmp);
  snprintf(out, sizeof out, "%s/aranges-half.bin", tmp);
  if (sh("objcopy --dump-section .debug_aranges=%s %s %s/scratch", in, full,
         tmp) != 0)
    return -1;
  FILE *f = fopen(in, "rb"), *g = fopen(out, "wb");
  int rc = f && g ? 0 : -1;
  unsigned char *buf = malloc(1 << 20);
  size_t n = f && buf ? fread(buf, 1, 1 << 20, f) : 0, pos = 0, sets = 0;
  while (rc == 0 && pos + 4 <= n) {
    uint32_t len;
    memcpy(&len, buf + pos, 4);
    if (len >= 0xfffffff0u || len > n - pos - 4) {
      rc = -1;
      break;
    }
    if (sets++ % 2 == 0)
      fwrite(buf + pos, 1, 4 + (size_t)len, g);
    pos += 4 + (size_t)len;
  }
  free(buf);
  if (f)
    fclose(f);
  if (g)
    fclose(g);
  if (rc == 0)
    rc =
        sh("objcopy --update-section .debug_aranges=%s %s %s", out, full, part);
  return rc;
}

/* How many of the functions of path (nm -S, until max) have at their
 * first instructions the same inline chain, not empty, in path and in ref;
 * -1 at the first that differs. */
static int same_chains_at_functions(const char *path, const char *ref,
                                    int max) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "nm -S --defined-only %s | grep ' [Tt] '", path);
  FILE *p = popen(cmd, "r");
  cp_line_chain *a = malloc(sizeof *a), *b = malloc(sizeof *b);
  cp_dwarf_object pa = {.path = path, .build_id = ""};
  cp_dwarf_object pb = {.path = ref, .build_id = ""};
  char line[1024], ta[4096], tb[4096];
  int same = 0;
  unsigned long long lo, size;
  while (p && same >= 0 && same < max && fgets(line, sizeof line, p))
    if (sscanf(line, "%llx %llx", &lo, &size) == 2 && size > 4) {
      cp_dwarf_lookup(&pa, lo + 4, a);
      cp_dwarf_lookup(&pb, lo + 4, b);
      chain_text(a, ta, sizeof ta);
      chain_text(b, tb, sizeof tb);
      if (strcmp(ta, tb) != 0) {
        fprintf(stderr, "%s %llx: %s\n%s: %s\n", path, lo + 4, ta, ref, tb);
        same = -1;
      } else {
        same += a->n > 0; /* code without DWARF is not counted */
      }
    }
  if (p)
    pclose(p);
  free(a);
  free(b);
  return same;
}

/* Units are found by .debug_aranges where it lists them and by their
 * root DIE otherwise (clang emits no .debug_aranges; a unit may be
 * missing from it): with every other set of libc6-dbg's libc removed, or
 * the section removed, every chain is the one of the whole section; and
 * the workload's driver keeps its inlined helpers. */
static void test_units_missing_from_aranges(void) {
  char full[600], half[600], none[600];
  snprintf(full, sizeof full, "%s/ar-full", tmp);
  snprintf(half, sizeof half, "%s/ar-half", tmp);
  snprintf(none, sizeof none, "%s/ar-none", tmp);
  uint64_t lo, hi;
  CHECK_EQ_INT(driver_range(BIN, &lo, &hi), 0);
  CHECK_EQ_INT(aranges_variant(BIN, full, none, 1), 0);
  CHECK(same_chains(none, full, lo, hi) > 0);
  cp_dwarf_reset();

  cp_symbol sym;
  uint64_t pc = (uint64_t)(uintptr_t)&strtol + 4;
  char debug[512];
  if (cp_symbols_lookup(pc, &sym) != 0 || !sym.mapping ||
      !strstr(sym.mapping->path, "/libc.so")) {
    printf("SKIP test_units_missing_from_aranges (libc): strtol is not "
           "libc's\n");
    return;
  }
  snprintf(debug, sizeof debug, "/usr/lib/debug/.build-id/%.2s/%s.debug",
           sym.mapping->build_id, sym.mapping->build_id + 2);
  if (access(debug, R_OK) != 0) {
    printf("SKIP test_units_missing_from_aranges (libc): no %s (libc6-dbg "
           "not installed)\n",
           debug);
    return;
  }
  CHECK_EQ_INT(aranges_variant(debug, full, half, 0), 0);
  int same = same_chains_at_functions(half, full, 3000);
  printf("libc: %d functions with the same chains\n", same);
  CHECK(same >= 1000);
  cp_dwarf_reset();
  CHECK_EQ_INT(aranges_variant(debug, full, none, 1), 0);
  CHECK(same_chains_at_functions(none, full, 3000) >= 1000);
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
          T(test_line_reader_matches_libdw), T(test_dwz_supplementary_file),
          T(test_replaced_file), T(test_budget), T(test_prepare),
          T(test_cxx_template_member), T(test_libc_lines),
          T(test_units_missing_from_aranges), T(test_library_replaced_on_disk),
          T(test_open_modules_bounded), T(test_mutated_files), T(cleanup))
