/* Native frames with file, line and inline chains: a -O2 -g program whose hot
 * loops are two always-inlined helpers (2:1) run under `contprof run`; the
 * helpers appear as inlined Lines with driver after them, with their measured
 * shares, every line inside the helper's body, each sampled address's chain
 * equal to `addr2line -i -f`'s, and go tool pprof -lines shows them. */
#include <inttypes.h>

#include "harness.h"
#include "test.h"

#define CONTPROF CP_BUILD_DIR "/contprof"
#define WORKLOAD CP_BUILD_DIR "/tests/inline_workload"
#define WORKLOAD_SRC CP_SOURCE_DIR "/tests/integration/inline_workload.c"

/* Line numbers of the markers in the workload's source. */
static int marker_line(const char *marker) {
  FILE *f = fopen(WORKLOAD_SRC, "r");
  char buf[512];
  int n = 0, found = 0;
  while (f && fgets(buf, sizeof buf, f)) {
    n++;
    if (strstr(buf, marker)) {
      found = n;
      break;
    }
  }
  if (f)
    fclose(f);
  return found;
}

static const char *line_function(const pprof_profile *p,
                                 const Perftools__Profiles__Line *l) {
  const Perftools__Profiles__Function *f =
      pprof_find_function(p, l->function_id);
  return f ? pprof_str(p, f->name) : "";
}

static const char *base(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* One sampled address and the chain the profile gives it. */
typedef struct sampled {
  uint64_t elf_address;
  char chain[1024]; /* "fn file:line|fn file:line|" innermost first */
} sampled;

/* The same address's chain as addr2line -i -f prints it. */
static int addr2line_chains(const char *bin, sampled *s, size_t n,
                            char (*out)[1024]) {
  size_t cmd_size = 64 + strlen(bin) + n * 20;
  char *cmd = malloc(cmd_size);
  size_t used =
      (size_t)snprintf(cmd, cmd_size, "addr2line -i -f -a -e %s", bin);
  for (size_t i = 0; i < n; i++)
    used += (size_t)snprintf(cmd + used, cmd_size - used, " %" PRIx64,
                             s[i].elf_address);
  FILE *p = popen(cmd, "r");
  free(cmd);
  if (!p)
    return -1;
  char fn[512], loc[1024];
  long cur = -1;
  while (fgets(fn, sizeof fn, p)) {
    fn[strcspn(fn, "\n")] = 0;
    if (strncmp(fn, "0x", 2) == 0) {
      cur++;
      if ((size_t)cur < n)
        out[cur][0] = 0;
      continue;
    }
    if (!fgets(loc, sizeof loc, p) || cur < 0 || (size_t)cur >= n)
      break;
    char *colon = strrchr(loc, ':');
    long line = colon ? strtol(colon + 1, NULL, 10) : 0;
    if (colon)
      *colon = 0;
    size_t len = strlen(out[cur]);
    snprintf(out[cur] + len, 1024 - len, "%s %s:%ld|", fn, base(loc), line);
  }
  pclose(p);
  return (size_t)(cur + 1) == n ? 0 : -1;
}

static void test_inline_chains(void) {
  int heavy_lo = marker_line("HEAVY_BEGIN"),
      heavy_hi = marker_line("HEAVY_END");
  int light_lo = marker_line("LIGHT_BEGIN"),
      light_hi = marker_line("LIGHT_END");
  CHECK(heavy_lo > 0 && heavy_hi > heavy_lo && light_lo > heavy_hi &&
        light_hi > light_lo);

  char *dir = make_temp_dir("lines");
  char *argv[] = {CONTPROF,   "run",  "--hz", "199",    "--output", dir,
                  "--period", "3600", "--",   WORKLOAD, "5",        NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, NULL, r), 0);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  pprof_profile *profiles[4];
  char names[4][512];
  size_t np = read_profiles(dir, profiles, 4, names);
  CHECK(np >= 1);
  if (np == 0)
    return;
  const pprof_profile *p = profiles[0];
  int vi = pprof_sample_type_index(p, "cpu-samples");
  CHECK(vi >= 0);

  int64_t total = 0, heavy = 0, light = 0, outside = 0, not_inlined = 0;
  sampled *seen = calloc(4096, sizeof *seen);
  size_t nseen = 0;
  for (size_t i = 0; i < p->n_sample; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    int64_t v = s->value[vi];
    total += v;
    if (s->n_location_id == 0)
      continue;
    const Perftools__Profiles__Location *loc =
        pprof_find_location(p, s->location_id[0]);
    if (!loc || loc->n_line == 0)
      continue;
    const char *leaf = line_function(p, loc->line[0]);
    int is_heavy = strcmp(leaf, "heavy_mix") == 0;
    int is_light = strcmp(leaf, "light_mix") == 0;
    if (!is_heavy && !is_light)
      continue;
    int64_t line = loc->line[0]->line;
    int lo = is_heavy ? heavy_lo : light_lo,
        hi = is_heavy ? heavy_hi : light_hi;
    if (line <= lo || line >= hi)
      outside += v;
    /* Inlined into driver: the next Line is driver's, at the call. */
    if (loc->n_line < 2 ||
        strcmp(line_function(p, loc->line[1]), "driver") != 0)
      not_inlined += v;
    *(is_heavy ? &heavy : &light) += v;

    const Perftools__Profiles__Mapping *m =
        pprof_find_mapping(p, loc->mapping_id);
    if (m && nseen < 4096 && strcmp(pprof_str(p, m->filename), WORKLOAD) == 0) {
      sampled *e = &seen[nseen++];
      e->elf_address = loc->address - m->memory_start + m->file_offset;
      e->chain[0] = 0;
      for (size_t k = 0; k < loc->n_line; k++) {
        const Perftools__Profiles__Function *f =
            pprof_find_function(p, loc->line[k]->function_id);
        size_t len = strlen(e->chain);
        snprintf(e->chain + len, sizeof e->chain - len, "%s %s:%" PRId64 "|",
                 pprof_str(p, f->name), base(pprof_str(p, f->filename)),
                 loc->line[k]->line);
      }
    }
  }
  fprintf(stderr,
          "total=%" PRId64 " heavy=%" PRId64 " light=%" PRId64
          " outside=%" PRId64 " not_inlined=%" PRId64 " addresses=%zu\n",
          total, heavy, light, outside, not_inlined, nseen);
  /* 5 CPU seconds at 199 Hz: ~1000 samples, so a share's standard error is 1.5
   * points; 6 points is four of them. The truth is the helpers' CPU time as
   * the workload measured it: 66.6% heavy alone, and a loaded machine moves
   * it (a CI run sampled 60.3% where 66.7% was assumed). */
  unsigned long long heavy_ns = 0, light_ns = 0;
  const char *done = strstr(r->out, "done heavy_ns=");
  CHECK(done && sscanf(done, "done heavy_ns=%llu light_ns=%llu", &heavy_ns,
                       &light_ns) == 2);
  double truth = heavy_ns + light_ns
                     ? 100.0 * (double)heavy_ns / (double)(heavy_ns + light_ns)
                     : 0;
  CHECK(total > 400);
  CHECK(heavy + light >= total * 9 / 10);
  double hs =
      heavy + light ? 100.0 * (double)heavy / (double)(heavy + light) : 0;
  fprintf(stderr, "heavy share: %.1f%% sampled, %.1f%% measured\n", hs, truth);
  CHECK(hs > truth - 6 && hs < truth + 6);
  CHECK_EQ_INT(outside, 0);
  CHECK_EQ_INT(not_inlined, 0);

  /* Every sampled address of the workload as addr2line sees it. */
  CHECK(nseen > 0);
  char(*want)[1024] = calloc(nseen ? nseen : 1, sizeof *want);
  CHECK_EQ_INT(addr2line_chains(WORKLOAD, seen, nseen, want), 0);
  size_t differ = 0;
  for (size_t i = 0; i < nseen; i++) {
    if (strcmp(seen[i].chain, want[i]) != 0 && differ++ < 5)
      fprintf(stderr, "0x%" PRIx64 ": profile %s, addr2line %s\n",
              seen[i].elf_address, seen[i].chain, want[i]);
  }
  CHECK_EQ_INT(differ, 0);

  /* go tool pprof -lines shows the helpers with their file:line. */
  char cmd[1200];
  snprintf(cmd, sizeof cmd,
           "HOME=/tmp GOCACHE=/tmp/contprof-gocache go tool pprof -lines -top "
           "%s 2>&1",
           names[0]);
  FILE *gp = popen(cmd, "r");
  char buf[16384];
  size_t got = fread(buf, 1, sizeof buf - 1, gp);
  buf[got] = 0;
  CHECK_EQ_INT(pclose(gp), 0);
  CHECK(strstr(buf, "heavy_mix") && strstr(buf, "inline_workload.c:"));
  CHECK(strstr(buf, "light_mix") != NULL);
  if (!strstr(buf, "inline_workload.c:"))
    fprintf(stderr, "go tool pprof said:\n%s\n", buf);

  /* contprof top --lines: the helpers' rows name their file:line. */
  snprintf(cmd, sizeof cmd, "%s top --lines -n 3 %s 2>&1", CONTPROF, names[0]);
  gp = popen(cmd, "r");
  got = fread(buf, 1, sizeof buf - 1, gp);
  buf[got] = 0;
  CHECK_EQ_INT(pclose(gp), 0);
  char row[512];
  snprintf(row, sizeof row, "heavy_mix %s:", WORKLOAD_SRC);
  CHECK(strstr(buf, row) != NULL);
  if (!strstr(buf, row))
    fprintf(stderr, "contprof top --lines said:\n%s\n", buf);

  free(want);
  free(seen);
  for (size_t i = 0; i < np; i++)
    pprof_profile_free(profiles[i]);
  free(r);
  remove_dir(dir);
}

/* Where libdw.so.1 cannot be loaded (a shim makes its dlopen fail): one
 * `contprof:` line says so, the program's exit is its own, and the profile
 * keeps its function names from the symbol tables, without lines. */
static void test_without_libdw(void) {
  char *dir = make_temp_dir("nolibdw");
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "LD_PRELOAD=%s/tests/libcp_no_libdw.so %s run --hz 199 --output %s "
           "-- %s 1 2>&1",
           CP_BUILD_DIR, CONTPROF, dir, WORKLOAD);
  run_result *r = run_shell(cmd, NULL);
  const char *say = "contprof: cannot load libdw.so.1";
  const char *first = strstr(r->out, say);
  CHECK(first != NULL);
  CHECK(first && strstr(first + 1, say) == NULL); /* once */
  pprof_profile *profiles[4];
  size_t np = read_profiles(dir, profiles, 4, NULL);
  CHECK_EQ_INT(np, 1);
  if (np == 1) {
    const pprof_profile *p = profiles[0];
    int named = 0, with_line = 0;
    for (size_t i = 0; i < p->n_location; i++)
      for (size_t k = 0; k < p->location[i]->n_line; k++) {
        const Perftools__Profiles__Line *l = p->location[i]->line[k];
        const char *fn = line_function(p, l);
        named |= strncmp(fn, "driver", 6) == 0; /* driver.constprop.0 */
        with_line += l->line != 0;
      }
    CHECK(named);
    CHECK_EQ_INT(with_line, 0);
  }
  if (!first)
    fprintf(stderr, "the run said:\n%s\n", r->out);
  for (size_t i = 0; i < np; i++)
    pprof_profile_free(profiles[i]);
  free(r);
  remove_dir(dir);
}

/* The lines of the first location whose function is fn in the single
 * profile dir holds: -1 no such location, else its line (0: none). */
static int64_t line_of(const char *dir, const char *fn) {
  pprof_profile *profiles[4];
  size_t np = read_profiles(dir, profiles, 4, NULL);
  CHECK_EQ_INT(np, 1);
  int64_t line = -1;
  for (size_t i = 0; np == 1 && line < 0 && i < profiles[0]->n_location; i++) {
    const Perftools__Profiles__Location *loc = profiles[0]->location[i];
    for (size_t k = 0; k < loc->n_line; k++)
      if (strcmp(line_function(profiles[0], loc->line[k]), fn) == 0)
        line = loc->line[k]->line;
  }
  for (size_t i = 0; i < np; i++)
    pprof_profile_free(profiles[i]);
  return line;
}

/* A process of a tenth of a second reads the debug information that fits
 * in CONTPROF_MAX_OVERHEAD_PCT of its CPU (its own: a few kB) and puts off
 * libc's (libc6-dbg's 14 MB, about 30 ms: three times its life), whose
 * frames keep their function names without lines (named by a scan: libc's
 * symbol table is put off too); with the cap off it
 * reads both, and so does one that has forked (its children would inherit
 * what it read). `contprof symbolize` gives the put-off frames their lines
 * (docs/symbols.md, "Short-lived processes"). */
static void test_short_process_reads_what_fits(void) {
  run_result *id = run_shell(
      "readelf -n /lib/x86_64-linux-gnu/libc.so.6 | sed -n 's/.*Build ID: "
      "\\(..\\)\\(.*\\)/\\/usr\\/lib\\/debug\\/.build-id\\/\\1\\/\\2.debug/p'",
      NULL);
  char debug[512];
  size_t len = strcspn(id->out, "\n");
  len = len < sizeof debug - 1 ? len : sizeof debug - 1;
  memcpy(debug, id->out, len);
  debug[len] = 0;
  free(id);
  if (!debug[0] || access(debug, R_OK) != 0) {
    printf("SKIP test_short_process_reads_what_fits: no debug file of libc "
           "(libc6-dbg not installed)\n");
    return;
  }
  /* Under a sanitizer our reading (the symbol tables, the program's own
   * debug information) costs five to ten times as much, the workload's CPU
   * what its length is: the allowance of a longer run. At 0.5 s (10 ms
   * allowed) a run beside CI's other stages spent it on the program's own
   * symbol table and scans of the loader's and our library's frames, and
   * put off the program's debug information (2 runs in 8); 1 s allows 20
   * ms, still short of libc's debug information (about 28 ms). */
  const char *seconds = CP_TEST_SANITIZED ? "1.0" : "0.1";
  const char *const caps[] = {"2", "0", "2"};
  const char *const forks[] = {"", "", "fork"};
  int64_t libc_line[3], own_line[3], symbolized_line = -1;
  for (int c = 0; c < 3; c++) {
    char *dir = make_temp_dir("short");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "CONTPROF_MAX_OVERHEAD_PCT=%s CONTPROF_FOLLOW_FORK=0 "
             "CONTPROF_LOG_LEVEL=debug %s run --hz 999 --output %s -- %s %s "
             "%s 2>&1",
             caps[c], CONTPROF, dir, WORKLOAD, seconds, forks[c]);
    run_result *r = run_shell(cmd, NULL);
    int put_off =
        strstr(r->out, "puts off reading the debug information "
                       "of /usr/lib/x86_64-linux-gnu/libc.so.6") != NULL;
    CHECK_EQ_INT(put_off, c == 0);
    /* libc's symbol table too (3 ms): its frames are named by a scan. */
    int scanned =
        strstr(r->out, "puts off the symbol table of "
                       "/usr/lib/x86_64-linux-gnu/libc.so.6") != NULL &&
        strstr(r->out, "addresses of /usr/lib/x86_64-linux-gnu/libc.so.6 "
                       "by a scan") != NULL;
    CHECK_EQ_INT(scanned, c == 0);
    libc_line[c] = line_of(dir, "__libc_start_call_main");
    own_line[c] = line_of(dir, "heavy_mix");
    printf("cap %s%%%s: __libc_start_call_main line %lld, heavy_mix line "
           "%lld\n",
           caps[c], c == 2 ? ", forked" : "", (long long)libc_line[c],
           (long long)own_line[c]);
    if ((c == 0 && !put_off) || own_line[c] <= 0)
      printf("the run said:\n%s\n", r->out);
    free(r);
    if (c == 0) {
      char *out = make_temp_dir("short-symbolized");
      snprintf(cmd, sizeof cmd,
               "%s symbolize %s/*.pb.gz -o %s/symbolized.pb.gz 2>&1", CONTPROF,
               dir, out);
      free(run_shell(cmd, NULL));
      symbolized_line = line_of(out, "__libc_start_call_main");
      printf("symbolized: __libc_start_call_main line %lld\n",
             (long long)symbolized_line);
      remove_dir(out);
    }
    remove_dir(dir);
  }
  CHECK_EQ_INT(libc_line[0], 0); /* named, no line */
  CHECK_EQ_INT(symbolized_line, libc_line[1]);
  CHECK(libc_line[1] > 0 && libc_line[2] > 0);
  CHECK(own_line[0] > 0 && own_line[1] > 0 && own_line[2] > 0);
}

TEST_MAIN(T(test_inline_chains), T(test_without_libdw),
          T(test_short_process_reads_what_fits))
