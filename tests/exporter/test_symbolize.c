/* CONTPROF_SYMBOLIZE=none and `contprof symbolize`: the same generation (this
 * test's own stacks: an always-inlined helper, a plain function, libc)
 * exported with none carries addresses, mappings and build ids only; the CLI
 * symbolizes that file into the profile the process would have written with
 * local: the same functions, files and lines for every sample; a mapping
 * whose file is elsewhere is symbolized from its build id's debug file. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aggregator/calltree.h"
#include "aggregator/dwarf.h"
#include "aggregator/symbols.h"
#include "config.h"
#include "exporter/export.h"
#include "exporter/pprof.h"
#include "exporter/pprof_read.h"
#include "test.h"

#define CONTPROF CP_BUILD_DIR "/contprof"

static volatile uint64_t sink;

__attribute__((noinline)) static uint64_t where(void) {
  return (uint64_t)(uintptr_t)__builtin_return_address(0) - 1;
}

static inline __attribute__((always_inline)) uint64_t inlined_helper(int k) {
  uint64_t a = where();
  __asm__ volatile("" ::: "memory"); /* no tail call: a return address */
  return a + (uint64_t)(k & 0);
}

__attribute__((noinline)) static uint64_t outer_function(int k) {
  uint64_t a = inlined_helper(k);
  sink = a;
  return a;
}

static const char *env_none(const char *name, void *ctx) {
  (void)ctx;
  if (strcmp(name, "CONTPROF_SYMBOLIZE") == 0)
    return "none";
  if (strcmp(name, "CONTPROF_LOG_LEVEL") == 0)
    return "error";
  return NULL;
}

static const char *env_local(const char *name, void *ctx) {
  (void)ctx;
  return strcmp(name, "CONTPROF_LOG_LEVEL") == 0 ? "error" : NULL;
}

/* Exports one generation of the stacks under cfg; returns the gzip bytes. */
static uint8_t *export_stacks(const cp_config *cfg, const uint64_t *frames,
                              size_t nframes, size_t *len) {
  cp_symbols_reset();
  cp_symbols_set_names(!cfg->symbolize_none);
  cp_generation *g = cp_gen_create(1, 64 << 20);
  cp_sample_key key = {0};
  /* Three stacks: the whole one and its two shorter tails. */
  for (size_t skip = 0; skip < nframes; skip++)
    CHECK_EQ_INT(cp_gen_add(g, frames + skip, nframes - skip, 0, &key,
                            CONTPROF_KIND_CPU, 1, 1000),
                 0);
  cp_export_meta m = {.cfg = cfg,
                      .host = "h",
                      .pid = getpid(),
                      .runtime_id = "r",
                      .runtime = "native",
                      .runtime_version = "1",
                      .start_ns = 1,
                      .end_ns = 2,
                      .cpu_period_ns = 10000000};
  uint8_t *out = NULL;
  CHECK_EQ_INT(cp_export_pprof(g, &m, CP_DIALECT_DATADOG, &out, len), 0);
  cp_gen_destroy(g);
  return out;
}

static pprof_profile *decode(const uint8_t *data, size_t len) {
  pprof_profile *p = NULL;
  char err[256];
  if (pprof_read_buffer(data, len, 64 << 20, &p, err, sizeof err) != 0)
    fprintf(stderr, "decode: %s\n", err);
  return p;
}

/* "name|system|file|start:line;" for every Line of every location of sample
 * i, leaf first. */
static void describe(const pprof_profile *p, size_t i, char *out, size_t size) {
  size_t used = 0;
  out[0] = 0;
  const Perftools__Profiles__Sample *s = p->sample[i];
  for (size_t d = 0; d < s->n_location_id; d++) {
    const Perftools__Profiles__Location *l =
        pprof_find_location(p, s->location_id[d]);
    for (size_t k = 0; l && k < l->n_line; k++) {
      const Perftools__Profiles__Function *f =
          pprof_find_function(p, l->line[k]->function_id);
      used += (size_t)snprintf(
          out + used, size - used, "%s|%s|%s|%" PRId64 ":%" PRId64 ";",
          pprof_str(p, f->name), pprof_str(p, f->system_name),
          pprof_str(p, f->filename), f->start_line, l->line[k]->line);
      if (used >= size)
        return;
    }
    used += (size_t)snprintf(out + used, size - used, "/");
    if (used >= size)
      return;
  }
}

static void test_none_then_symbolize(void) {
  uint64_t frames[3] = {outer_function(1),
                        (uint64_t)(uintptr_t)&outer_function + 1,
                        (uint64_t)(uintptr_t)&getpid + 1};
  cp_config none, local;
  CHECK_EQ_INT(cp_config_load(&none, NULL, env_none, NULL), 0);
  CHECK_EQ_INT(cp_config_load(&local, NULL, env_local, NULL), 0);
  CHECK_EQ_INT(none.symbolize_none, 1);
  CHECK_EQ_INT(local.symbolize_none, 0);

  size_t nlen = 0, llen = 0;
  uint8_t *ndata = export_stacks(&none, frames, 3, &nlen);
  uint8_t *ldata = export_stacks(&local, frames, 3, &llen);
  pprof_profile *n = ndata ? decode(ndata, nlen) : NULL;
  pprof_profile *l = ldata ? decode(ldata, llen) : NULL;
  CHECK(n && l);
  if (!n || !l)
    return;
  /* none: no functions, no lines; mappings with their build ids. */
  CHECK_EQ_INT(n->n_function, 0);
  for (size_t i = 0; i < n->n_location; i++)
    CHECK_EQ_INT(n->location[i]->n_line, 0);
  CHECK(n->n_mapping >= 2);
  for (size_t i = 0; i < n->n_mapping; i++)
    CHECK(strlen(pprof_str(n, n->mapping[i]->build_id)) >= 16);

  char dir[] = "/tmp/contprof-symbolize-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char in[128], out[128], cmd[512];
  snprintf(in, sizeof in, "%s/none.pb.gz", dir);
  snprintf(out, sizeof out, "%s/symbolized.pb.gz", dir);
  FILE *f = fopen(in, "w");
  CHECK(f && fwrite(ndata, 1, nlen, f) == nlen);
  if (f)
    fclose(f);
  snprintf(cmd, sizeof cmd, "%s symbolize %s -o %s", CONTPROF, in, out);
  CHECK_EQ_INT(system(cmd), 0);
  /* OUT is never overwritten. */
  snprintf(cmd, sizeof cmd, "%s symbolize %s -o %s 2>/dev/null", CONTPROF, in,
           out);
  CHECK(system(cmd) != 0);
  /* Through a pipe: IN and OUT "-" are stdin and stdout, byte for byte what
   * the file got. */
  snprintf(cmd, sizeof cmd, "%s symbolize - -o - < %s | cmp -s - %s", CONTPROF,
           in, out);
  CHECK_EQ_INT(system(cmd), 0);
  struct stat st;
  CHECK(stat(out, &st) == 0 && (st.st_mode & 07777) == 0600);
  /* An unknown option is named. */
  snprintf(cmd, sizeof cmd,
           "%s symbolize %s -o %s.2 --bogus 2>&1 | grep -q \"unknown option "
           "'--bogus'\"",
           CONTPROF, in, out);
  CHECK_EQ_INT(system(cmd), 0);
  pprof_profile *s = NULL;
  char err[256];
  CHECK_EQ_INT(pprof_read_file(out, &s, err, sizeof err), 0);
  if (s) {
    CHECK_EQ_INT(s->n_sample, l->n_sample);
    int inlined = 0;
    for (size_t i = 0; i < s->n_sample && i < l->n_sample; i++) {
      char a[8192], b[8192];
      describe(s, i, a, sizeof a);
      describe(l, i, b, sizeof b);
      CHECK_EQ_STR(a, b);
      inlined |= strstr(b, "inlined_helper|") && strstr(b, "outer_function|");
      CHECK(s->sample[i]->value[0] == l->sample[i]->value[0]);
    }
    /* The comparison covers an inline chain with lines. */
    CHECK(inlined);
    pprof_profile_free(s);
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (!getenv("CP_TEST_KEEP"))
    CHECK_EQ_INT(system(cmd), 0);
  pprof_profile_free(n);
  pprof_profile_free(l);
  free(ndata);
  free(ldata);
  cp_config_free(&none);
  cp_config_free(&local);
}

#define WORKLOAD CP_BUILD_DIR "/tests/inline_workload"

/* By build id: a profile whose mapping names a file this machine does not
 * have is symbolized from DIR/.build-id/xx/yyyy.debug (--debug-dir). */
static void test_symbolize_by_build_id(void) {
  char dir[] = "/tmp/contprof-symbolize-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char cmd[1024], id[160] = "";
  snprintf(cmd, sizeof cmd,
           "readelf -n %s | sed -n 's/.*Build ID: *\\([0-9a-f]*\\).*/\\1/p'",
           WORKLOAD);
  FILE *p = popen(cmd, "r");
  if (p && fgets(id, sizeof id, p))
    id[strcspn(id, "\n")] = 0;
  if (p)
    pclose(p);
  CHECK(strlen(id) > 8);
  snprintf(cmd, sizeof cmd,
           "mkdir -p %s/dbg/.build-id/%.2s && objcopy --only-keep-debug %s "
           "%s/dbg/.build-id/%.2s/%s.debug",
           dir, id, WORKLOAD, dir, id, id + 2);
  CHECK_EQ_INT(system(cmd), 0);

  /* An address of the workload where heavy_mix is inlined into driver:
   * somewhere in driver's code, found with nm (an instrumented build, as
   * under ASan, lays the text out differently). */
  unsigned long long drv = 0, drv_size = 0;
  snprintf(cmd, sizeof cmd, "nm -S --defined-only %s", WORKLOAD);
  p = popen(cmd, "r");
  char line[512];
  while (p && fgets(line, sizeof line, p)) {
    unsigned long long a, n;
    char type, name[256];
    if (sscanf(line, "%llx %llx %c %255s", &a, &n, &type, name) == 4 &&
        strncmp(name, "driver", 6) == 0 &&
        (name[6] == 0 || name[6] == '.')) /* driver.constprop.0 at -O2 */
      drv = a, drv_size = n;
  }
  if (p)
    pclose(p);
  CHECK(drv != 0 && drv_size != 0);
  cp_line_chain *c = malloc(sizeof *c);
  cp_dwarf_object obj = {.path = WORKLOAD, .build_id = id};
  uint64_t where = 0;
  for (uint64_t a = drv; a < drv + drv_size && !where; a++)
    if (cp_dwarf_lookup(&obj, a, c) >= 2 &&
        strcmp(c->frames[0].function, "heavy_mix") == 0)
      where = a;
  CHECK(where != 0);
  free(c);

  /* The executable segment's file offset and address: 0x1000 in the usual
   * layout, 0x2000 under ASan since the workload imports a few more
   * functions. */
  unsigned long long text_off = 0, text_vaddr = 0;
  snprintf(cmd, sizeof cmd, "readelf -lW %s", WORKLOAD);
  p = popen(cmd, "r");
  while (p && fgets(line, sizeof line, p)) {
    unsigned long long off, va;
    if (strstr(line, " R E ") &&
        sscanf(line, " LOAD 0x%llx 0x%llx", &off, &va) == 2)
      text_off = off, text_vaddr = va;
  }
  if (p)
    pclose(p);
  CHECK(text_vaddr != 0);

  /* The none profile as another machine wrote it: text mapped at
   * 0x555500000000 + its address, from its file offset. */
  pprof_builder *b = pprof_builder_create();
  pprof_add_sample_type(b, "samples", "count");
  uint64_t m = pprof_add_mapping(b, 0x555500000000ull + text_vaddr,
                                 0x555500100000ull + text_vaddr, text_off,
                                 "/nonexistent/inline_workload", id, 0);
  uint64_t l =
      pprof_add_location_lines(b, m, 0x555500000000ull + where, NULL, 0);
  int64_t v = 7;
  CHECK_EQ_INT(pprof_add_sample(b, &l, 1, &v, 1, NULL, 0), 0);
  uint8_t *raw = NULL, *gz = NULL;
  size_t raw_len = 0, gz_len = 0;
  CHECK_EQ_INT(pprof_encode(b, &raw, &raw_len), 0);
  CHECK_EQ_INT(pprof_gzip(raw, raw_len, &gz, &gz_len), 0);
  pprof_builder_destroy(b);
  char in[128], out[128];
  snprintf(in, sizeof in, "%s/in.pb.gz", dir);
  snprintf(out, sizeof out, "%s/out.pb.gz", dir);
  FILE *f = fopen(in, "w");
  CHECK(f && fwrite(gz, 1, gz_len, f) == gz_len);
  if (f)
    fclose(f);
  free(raw);
  free(gz);
  snprintf(cmd, sizeof cmd, "%s symbolize %s -o %s --debug-dir %s/dbg",
           CONTPROF, in, out, dir);
  CHECK_EQ_INT(system(cmd), 0);
  pprof_profile *s = NULL;
  char err[256];
  CHECK_EQ_INT(pprof_read_file(out, &s, err, sizeof err), 0);
  if (s) {
    const Perftools__Profiles__Location *loc =
        pprof_find_location(s, s->sample[0]->location_id[0]);
    CHECK(loc && loc->n_line >= 2);
    if (loc && loc->n_line >= 2) {
      const char *names[2];
      pprof_location_functions(s, loc, names, 2);
      CHECK_EQ_STR(names[0], "heavy_mix");
      CHECK_EQ_STR(names[1], "driver");
      CHECK(loc->line[0]->line > 0);
    }
    pprof_profile_free(s);
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (!getenv("CP_TEST_KEEP"))
    CHECK_EQ_INT(system(cmd), 0);
}

TEST_MAIN(T(test_none_then_symbolize), T(test_symbolize_by_build_id))
