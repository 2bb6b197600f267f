/* The local view from the command line (issue #17): `contprof merge`,
 * `folded`, `flame` and `diff` run as a user would, on profiles built here;
 * their output is decoded and checked value for value, and go tool pprof
 * reads what merge writes. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "exporter/pprof.h"
#include "exporter/pprof_read.h"
#include "profile_files.h"
#include "test.h"

/* ---- helpers ------------------------------------------------------------- */

/* Runs contprof with argv (NULL-terminated), stdout and stderr into
 * OUT/ERR files under the temp dir; returns the exit status. */
static int contprof(char *const argv[], char **out, char **err) {
  char out_path[256], err_path[256];
  snprintf(out_path, sizeof out_path, "%s", tmp_path("cmd.out"));
  snprintf(err_path, sizeof err_path, "%s", tmp_path("cmd.err"));
  int rc = run_contprof(argv, out_path, err_path, NULL);
  if (out)
    *out = slurp(out_path, NULL);
  if (err)
    *err = slurp(err_path, NULL);
  return rc;
}

static int have_go(void) {
  int status = -1;
  char *go = run("command -v go", &status);
  int ok = go && status == 0 && go[0];
  free(go);
  if (!ok)
    printf("note: go is not installed; skipping the go tool pprof check\n");
  return ok;
}

/* ---- profiles of one program, two builds --------------------------------- */

/* Stacks root first by function index; values (samples, cpu ns). */
static const char *const fnames[] = {"main",   "serve", "parse", "hash",
                                     "memcpy", "inl_a", "inl_b"};
typedef struct stack_def {
  int frames[6];
  int nframes;
  int64_t samples, nanos;
  int thread;
} stack_def;
static const stack_def stacks[] = {
    {{0, 1, 2}, 3, 5, 50000000, 1},    {{0, 1, 2}, 3, 2, 20000000, 2},
    {{0, 1, 3, 4}, 4, 7, 70000000, 1}, {{0, 3}, 2, 1, 10000000, 1},
    {{0, 1, 2, 4}, 4, 4, 40000000, 2},
};

/* Builds the profile of "build" b: the same functions, but other
 * addresses, another mapping start and functions added in another order,
 * so that ids and addresses all differ between builds. */
static const char *write_build(const char *name, int build, int scale) {
  pprof_builder *pb = pprof_builder_create();
  pprof_add_sample_type(pb, "samples", "count");
  pprof_add_sample_type(pb, "cpu", "nanoseconds");
  pprof_set_default_sample_type(pb, "cpu");
  pprof_set_period(pb, "cpu", "nanoseconds", 10000000);
  pprof_set_time(pb, 1700000000000000000 + build * 60000000000ll, 60000000000);
  uint64_t base = build ? 0x7f1200000000ull : 0x400000ull;
  uint64_t map = pprof_add_mapping(pb, base, base + 0x100000, 0, "/usr/bin/app",
                                   build ? "b2" : "b1", 1);
  uint64_t fid[5], lid[5];
  for (int k = 0; k < 5; k++) {
    int i = build ? 4 - k : k;
    fid[i] = pprof_add_function(pb, fnames[i], fnames[i], "app.c", 10 * i);
  }
  for (int k = 0; k < 5; k++) {
    int i = build ? 4 - k : k;
    lid[i] = pprof_add_location(pb, map,
                                base + 0x1000 + 0x10 * i + (build ? 0x777 : 0),
                                fid[i], 100 + i);
  }
  for (size_t s = 0; s < sizeof stacks / sizeof stacks[0]; s++) {
    uint64_t ids[6];
    for (int k = 0; k < stacks[s].nframes; k++) /* leaf first */
      ids[k] = lid[stacks[s].frames[stacks[s].nframes - 1 - k]];
    int64_t v[2] = {stacks[s].samples * scale, stacks[s].nanos * scale};
    pprof_label l = {"thread id", NULL, stacks[s].thread, NULL};
    CHECK_EQ_INT(pprof_add_sample(pb, ids, stacks[s].nframes, v, 2, &l, 1), 0);
  }
  uint8_t *raw, *gz;
  size_t len, gzlen;
  CHECK_EQ_INT(pprof_encode(pb, &raw, &len), 0);
  CHECK_EQ_INT(pprof_gzip(raw, len, &gz, &gzlen), 0);
  const char *path = tmp_path(name);
  CHECK_EQ_INT(write_file(path, gz, gzlen), 0);
  free(raw);
  free(gz);
  pprof_builder_destroy(pb);
  return path;
}

static pprof_profile *read_profile(const char *path) {
  pprof_profile *p = NULL;
  char err[256];
  if (pprof_read_file(path, &p, err, sizeof err) != 0)
    fprintf(stderr, "read %s: %s\n", path, err);
  CHECK(p != NULL);
  return p;
}

/* A profile as "root;...;leaf|labels" -> values, for comparing. */
typedef struct flat_sample {
  char key[512];
  int64_t v[4];
} flat_sample;
typedef struct flat_profile {
  flat_sample s[64];
  size_t n, ntypes;
  int64_t total[4];
} flat_profile;

static void flatten(const pprof_profile *p, flat_profile *f) {
  memset(f, 0, sizeof *f);
  f->ntypes = p->n_sample_type;
  for (size_t i = 0; i < p->n_sample; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    char key[512] = "";
    for (size_t j = s->n_location_id; j-- > 0;) {
      const Perftools__Profiles__Location *l =
          pprof_find_location(p, s->location_id[j]);
      for (size_t k = l->n_line; k-- > 0;) {
        const Perftools__Profiles__Function *fn =
            pprof_find_function(p, l->line[k]->function_id);
        snprintf(key + strlen(key), sizeof key - strlen(key), "%s:%" PRId64 ";",
                 pprof_str(p, fn->name), l->line[k]->line);
      }
    }
    for (size_t j = 0; j < s->n_label; j++)
      snprintf(key + strlen(key), sizeof key - strlen(key), "|%s=%" PRId64,
               pprof_str(p, s->label[j]->key), s->label[j]->num);
    size_t at = 0;
    while (at < f->n && strcmp(f->s[at].key, key) != 0)
      at++;
    CHECK(at < 64);
    if (at == f->n) {
      snprintf(f->s[f->n++].key, sizeof key, "%s", key);
    }
    for (size_t t = 0; t < p->n_sample_type && t < 4; t++) {
      f->s[at].v[t] += s->value[t];
      f->total[t] += s->value[t];
    }
  }
}

static const flat_sample *flat_find(const flat_profile *f, const char *key) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->s[i].key, key) == 0)
      return &f->s[i];
  return NULL;
}

/* ---- merge --------------------------------------------------------------- */

/* Merging a profile with itself doubles every value, sample by sample;
 * merging two builds (other addresses, ids, mapping) merges by function:
 * the result has the first build's samples with the sum of values. */
static void test_merge_values(void) {
  char a[256], b[256], c[256], out[256];
  snprintf(a, sizeof a, "%s", write_build("a.pb.gz", 0, 1));
  snprintf(b, sizeof b, "%s", write_build("b.pb.gz", 1, 3));
  snprintf(c, sizeof c, "%s", write_build("c.pb.gz", 0, 5));
  snprintf(out, sizeof out, "%s", tmp_path("twice.pb.gz"));
  pprof_profile *pa = read_profile(a), *pb = read_profile(b);
  flat_profile fa, fb, fm;
  flatten(pa, &fa);
  flatten(pb, &fb);
  CHECK_EQ_INT(fa.n, 5);

  char *twice[] = {"contprof", "merge", "-o", out, a, a, NULL};
  char *err = NULL;
  CHECK_EQ_INT(contprof(twice, NULL, &err), 0);
  CHECK_EQ_STR(err, "");
  free(err);
  pprof_profile *pm = read_profile(out);
  if (!pa || !pb || !pm)
    return;
  flatten(pm, &fm);
  CHECK_EQ_INT(fm.n, fa.n);
  for (size_t i = 0; i < fa.n; i++) {
    const flat_sample *s = flat_find(&fm, fa.s[i].key);
    CHECK(s != NULL);
    for (size_t t = 0; s && t < 2; t++)
      CHECK_EQ_INT(s->v[t], 2 * fa.s[i].v[t]);
  }
  CHECK_EQ_INT(pm->n_sample_type, 2);
  CHECK_EQ_STR(pprof_str(pm, pm->default_sample_type), "cpu");
  CHECK(pm->n_comment == 1 &&
        strstr(pprof_str(pm, pm->comment[0]), "2 profiles") != NULL);
  pprof_profile_free(pm);

  /* Three inputs, two builds: totals are the sums, stacks by function. */
  char *builds[] = {"contprof", "merge", "-o", out, a, b, c, NULL};
  CHECK_EQ_INT(contprof(builds, NULL, NULL), 0);
  pm = read_profile(out);
  if (!pm)
    return;
  flatten(pm, &fm);
  CHECK_EQ_INT(fm.n, fa.n); /* not 10: b's addresses differ */
  CHECK_EQ_INT(pm->n_location, pa->n_location);
  CHECK_EQ_INT(pm->n_function, pa->n_function);
  for (size_t t = 0; t < 2; t++)
    CHECK_EQ_INT(fm.total[t], fa.total[t] * (1 + 3 + 5));
  for (size_t i = 0; i < fa.n; i++) {
    const flat_sample *s = flat_find(&fm, fa.s[i].key);
    CHECK(s != NULL && flat_find(&fb, fa.s[i].key) != NULL);
    for (size_t t = 0; s && t < 2; t++)
      CHECK_EQ_INT(s->v[t], 9 * fa.s[i].v[t]);
  }
  /* The time span of the inputs: a and c at t0, b a minute later. */
  CHECK_EQ_INT(pm->time_nanos, 1700000000000000000);
  CHECK_EQ_INT(pm->duration_nanos, 120000000000);
  CHECK(strstr(pprof_str(pm, pm->comment[0]),
               "3 profiles, from 2023-11-14T22:13:20Z to "
               "2023-11-14T22:15:20Z (120.000 s)") != NULL);
  pprof_profile_free(pm);

  /* Dropping the thread id folds the stacks that differed only by it. */
  char *drop[] = {
      "contprof", "merge", "--drop-labels", "thread id,x", "-o", out, a,
      b,          NULL};
  CHECK_EQ_INT(contprof(drop, NULL, NULL), 0);
  pm = read_profile(out);
  if (pm) {
    flatten(pm, &fm);
    CHECK_EQ_INT(fm.n, 4);
    const flat_sample *s = flat_find(&fm, "main:100;serve:101;parse:102;");
    CHECK(s != NULL && s->v[0] == (5 + 2) * 4 && s->v[1] == 70000000 * 4);
    CHECK_EQ_INT(fm.total[0], fa.total[0] * 4);
    pprof_profile_free(pm);
  }

  /* A directory: its .pb.gz files, nothing else. */
  const char *dir = tmp_path("dir");
  mkdir(dir, 0700);
  char path[300];
  snprintf(path, sizeof path, "%s/x.pb.gz", dir);
  CHECK_EQ_INT(rename(c, path), 0);
  snprintf(path, sizeof path, "%s/notes.txt", dir);
  write_file(path, "hello", 5);
  char dir_copy[256];
  snprintf(dir_copy, sizeof dir_copy, "%s", dir);
  char *dirs[] = {"contprof", "merge", "-o", out, dir_copy, a, NULL};
  CHECK_EQ_INT(contprof(dirs, NULL, NULL), 0);
  pm = read_profile(out);
  if (pm) {
    flatten(pm, &fm);
    CHECK_EQ_INT(fm.total[1], fa.total[1] * 6);
    pprof_profile_free(pm);
  }
  pprof_profile_free(pa);
  pprof_profile_free(pb);
}

/* Many processes of one program: 20 profiles, each 300 stacks of a pool
 * of 400 over 50 functions, each with its own mapping address and labels
 * to drop. The merge has exactly one location per function and one sample
 * per distinct stack, and every stack's sum. (Padding bytes compared with
 * memcmp once split equal locations, at random.) */
static void test_merge_many(void) {
  enum { NF = 50, POOL = 400, NP = 20, PER = 300 };
  static int depth[POOL], frames[POOL][12];
  static int64_t want[POOL];
  static int used[POOL];
  for (int s = 0; s < POOL; s++) {
    depth[s] = 3 + (int)(rng() % 10);
    for (int d = 0; d < depth[s]; d++)
      frames[s][d] = (int)(rng() % NF);
  }
  char paths[NP][256];
  char *argv[NP + 8] = {"contprof", "merge", "--drop-labels", "thread id",
                        "-o"};
  char out[256];
  snprintf(out, sizeof out, "%s", tmp_path("many.pb.gz"));
  argv[5] = out;
  int64_t total = 0;
  for (int p = 0; p < NP; p++) {
    pprof_builder *pb = pprof_builder_create();
    pprof_add_sample_type(pb, "samples", "count");
    uint64_t base = 0x10000000ull * (uint64_t)(p + 1);
    uint64_t map =
        pprof_add_mapping(pb, base, base + 0x100000, 0, "/bin/x", "", 1);
    uint64_t lid[NF];
    for (int f = 0; f < NF; f++) {
      char name[32];
      snprintf(name, sizeof name, "fn_%d", f);
      lid[f] = pprof_add_location(pb, map, base + 16 * (uint64_t)f,
                                  pprof_add_function(pb, name, name, "x.c", f),
                                  100 + f);
    }
    for (int k = 0; k < PER; k++) {
      int s = (int)(rng() % POOL);
      uint64_t ids[12];
      for (int d = 0; d < depth[s]; d++)
        ids[d] = lid[frames[s][d]];
      int64_t v = 1 + (int64_t)(rng() % 9);
      pprof_label l = {"thread id", NULL, (int64_t)(rng() % 4), NULL};
      CHECK_EQ_INT(pprof_add_sample(pb, ids, depth[s], &v, 1, &l, 1), 0);
      want[s] += v;
      used[s] = 1;
      total += v;
    }
    uint8_t *raw;
    size_t len;
    CHECK_EQ_INT(pprof_encode(pb, &raw, &len), 0);
    char name[32];
    snprintf(name, sizeof name, "many%d.pb", p);
    snprintf(paths[p], sizeof paths[p], "%s", tmp_path(name));
    CHECK_EQ_INT(write_file(paths[p], raw, len), 0);
    free(raw);
    pprof_builder_destroy(pb);
    argv[6 + p] = paths[p];
  }
  CHECK_EQ_INT(contprof(argv, NULL, NULL), 0);
  pprof_profile *m = read_profile(out);
  if (!m)
    return;
  size_t distinct = 0;
  for (int s = 0; s < POOL; s++) /* the pool may repeat a stack */
    for (int t = 0; used[s] && t <= s; t++)
      if (t == s ||
          (used[t] && depth[t] == depth[s] &&
           memcmp(frames[t], frames[s], sizeof(int) * (size_t)depth[s]) == 0)) {
        distinct += t == s;
        break;
      }
  CHECK_EQ_INT(m->n_location, NF);
  CHECK_EQ_INT(m->n_function, NF);
  CHECK_EQ_INT(m->n_sample, distinct);
  int64_t sum = 0;
  for (size_t i = 0; i < m->n_sample; i++) {
    sum += m->sample[i]->value[0];
    CHECK_EQ_INT(m->sample[i]->n_label, 0);
  }
  CHECK_EQ_INT(sum, total);
  pprof_profile_free(m);
}

/* Unsymbolized frames of two processes (ASLR: other mapping starts) merge
 * by mapping file and file offset; folded names them [file]. */
static void test_merge_unsymbolized(void) {
  char paths[2][256], out[256];
  for (int k = 0; k < 2; k++) {
    pprof_builder *pb = pprof_builder_create();
    pprof_add_sample_type(pb, "samples", "count");
    uint64_t start = k ? 0x7f1234560000ull : 0x400000ull;
    uint64_t map = pprof_add_mapping(pb, start, start + 0x10000, 0x1000,
                                     "/usr/lib/libapp.so", "", 0);
    uint64_t l[2] = {pprof_add_location(pb, map, start + 0x2345, 0, 0),
                     pprof_add_location(pb, map, start + 0x1111, 0, 0)};
    int64_t v = 2 + k;
    pprof_add_sample(pb, l, 2, &v, 1, NULL, 0);
    uint8_t *raw;
    size_t len;
    CHECK_EQ_INT(pprof_encode(pb, &raw, &len), 0);
    pprof_builder_destroy(pb);
    snprintf(paths[k], sizeof paths[k], "%s", tmp_path(k ? "u1.pb" : "u0.pb"));
    CHECK_EQ_INT(write_file(paths[k], raw, len), 0);
    free(raw);
  }
  snprintf(out, sizeof out, "%s", tmp_path("u.pb.gz"));
  char *argv[] = {"contprof", "merge", "-o", out, paths[0], paths[1], NULL};
  CHECK_EQ_INT(contprof(argv, NULL, NULL), 0);
  pprof_profile *m = read_profile(out);
  if (m) {
    CHECK_EQ_INT(m->n_location, 2);
    CHECK_EQ_INT(m->n_mapping, 1);
    CHECK_EQ_INT(m->n_sample, 1);
    CHECK(m->n_sample == 1 && m->sample[0]->value[0] == 5);
    /* The first process's addresses. */
    CHECK(m->n_location == 2 && m->location[0]->address == 0x402345);
    pprof_profile_free(m);
  }
  char *folded[] = {"contprof", "folded", out, NULL};
  char *text = NULL;
  CHECK_EQ_INT(contprof(folded, &text, NULL), 0);
  CHECK_EQ_STR(text, "[libapp.so];[libapp.so] 5\n");
  free(text);
}

/* Inline chains: a location with two Lines (inl_a inlined into serve)
 * stays one location with the same two Lines, distinct from inl_b's. */
static void test_merge_inline_chains(void) {
  typedef Perftools__Profiles__Line LI;
  typedef Perftools__Profiles__Location LO;
  typedef Perftools__Profiles__Function FU;
  char *strings[] = {"", "samples", "count", "serve", "inl_a", "inl_b"};
  FU f[3];
  FU *fp[3];
  for (int i = 0; i < 3; i++) {
    perftools__profiles__function__init(&f[i]);
    f[i].id = 10 + i;
    f[i].name = 3 + i;
    fp[i] = &f[i];
  }
  LI l[4];
  LI *lp[4];
  for (int i = 0; i < 4; i++) {
    perftools__profiles__line__init(&l[i]);
    lp[i] = &l[i];
  }
  l[0].function_id = 11, l[0].line = 5;  /* inl_a */
  l[1].function_id = 10, l[1].line = 50; /* in serve */
  l[2].function_id = 12, l[2].line = 7;  /* inl_b */
  l[3].function_id = 10, l[3].line = 50; /* in serve */
  LO lo[2];
  LO *lop[2];
  for (int i = 0; i < 2; i++) {
    perftools__profiles__location__init(&lo[i]);
    lo[i].id = 20 + i;
    lo[i].address = 0x1000 + i;
    lo[i].n_line = 2;
    lo[i].line = lp + 2 * i;
    lop[i] = &lo[i];
  }
  Perftools__Profiles__ValueType vt = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
  Perftools__Profiles__ValueType *vtp = &vt;
  vt.type = 1, vt.unit = 2;
  Perftools__Profiles__Sample s[2];
  Perftools__Profiles__Sample *sp[2];
  uint64_t locs[2] = {20, 21};
  int64_t vals[2] = {3, 4};
  for (int i = 0; i < 2; i++) {
    perftools__profiles__sample__init(&s[i]);
    s[i].n_location_id = 1;
    s[i].location_id = &locs[i];
    s[i].n_value = 1;
    s[i].value = &vals[i];
    sp[i] = &s[i];
  }
  Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
  p.n_sample_type = 1, p.sample_type = &vtp;
  p.n_sample = 2, p.sample = sp;
  p.n_location = 2, p.location = lop;
  p.n_function = 3, p.function = fp;
  p.n_string_table = 6, p.string_table = strings;
  size_t len = perftools__profiles__profile__get_packed_size(&p);
  uint8_t *buf = malloc(len);
  perftools__profiles__profile__pack(&p, buf);
  char in[256], out[256];
  snprintf(in, sizeof in, "%s", tmp_path("inline.pb"));
  snprintf(out, sizeof out, "%s", tmp_path("inline_out.pb.gz"));
  CHECK_EQ_INT(write_file(in, buf, len), 0);
  free(buf);
  char *argv[] = {"contprof", "merge", "-o", out, in, in, NULL};
  CHECK_EQ_INT(contprof(argv, NULL, NULL), 0);
  pprof_profile *m = read_profile(out);
  if (!m)
    return;
  flat_profile fm;
  flatten(m, &fm);
  CHECK_EQ_INT(m->n_location, 2);
  CHECK_EQ_INT(m->n_function, 3);
  const flat_sample *a = flat_find(&fm, "serve:50;inl_a:5;");
  const flat_sample *b = flat_find(&fm, "serve:50;inl_b:7;");
  CHECK(a && a->v[0] == 6);
  CHECK(b && b->v[0] == 8);
  pprof_profile_free(m);
}

/* go tool pprof -top on the merged file prints what contprof top prints
 * on the inputs, row for row. */
static void test_merge_go_top(void) {
  if (!have_go())
    return;
  char a[256], b[256], out[256];
  snprintf(a, sizeof a, "%s", write_build("ga.pb.gz", 0, 1));
  snprintf(b, sizeof b, "%s", write_build("gb.pb.gz", 1, 2));
  snprintf(out, sizeof out, "%s", tmp_path("gm.pb.gz"));
  char *argv[] = {"contprof", "merge", "-o", out, a, b, NULL};
  CHECK_EQ_INT(contprof(argv, NULL, NULL), 0);
  for (int t = 0; t < 2; t++) {
    const char *type = t ? "cpu" : "samples";
    char *top[] = {"contprof", "top", "--type", (char *)type, a, b, NULL};
    char *ours = NULL;
    CHECK_EQ_INT(contprof(top, &ours, NULL), 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "go tool pprof -top -nodefraction=0 -symbolize=none "
             "-sample_index=%s '%s'",
             type, out);
    int status = -1;
    char *go = run(cmd, &status);
    CHECK_EQ_INT(status, 0);
    /* The table: everything from the header row on. */
    const char *ot = ours ? strstr(ours, "      flat") : NULL;
    const char *gt = go ? strstr(go, "      flat") : NULL;
    CHECK(ot && gt);
    if (ot && gt) {
      CHECK_EQ_STR(ot, gt);
      CHECK(strstr(ot, "parse") && strstr(ot, "memcpy"));
    }
    /* And the total. */
    const char *otot = ours ? strstr(ours, "total ") : NULL;
    const char *gtot = go ? strstr(go, "% of ") : NULL;
    CHECK(otot && gtot &&
          strncmp(otot + 6, gtot + 5, strcspn(otot + 6, "\n")) == 0);
    free(ours);
    free(go);
  }
}

/* Hostile or mismatched inputs: one clear line, exit 1, no output file. */
static void test_merge_refuses(void) {
  char empty[256], a[256], other[256], out[256];
  snprintf(empty, sizeof empty, "%s", tmp_path("empty.pb.gz"));
  CHECK_EQ_INT(write_file(empty, "", 0), 0);
  snprintf(a, sizeof a, "%s", write_build("ra.pb.gz", 0, 1));
  snprintf(out, sizeof out, "%s", tmp_path("never.pb.gz"));
  pprof_builder *pb = pprof_builder_create();
  pprof_add_sample_type(pb, "alloc_space", "bytes");
  pprof_add_sample_type(pb, "samples", "count");
  uint64_t f = pprof_add_function(pb, "main", "main", "app.c", 1);
  uint64_t l = pprof_add_location(pb, 0, 0x10, f, 1);
  int64_t v[2] = {4096, 1};
  pprof_add_sample(pb, &l, 1, v, 2, NULL, 0);
  uint8_t *raw;
  size_t len;
  CHECK_EQ_INT(pprof_encode(pb, &raw, &len), 0);
  pprof_builder_destroy(pb);
  snprintf(other, sizeof other, "%s", tmp_path("heap.pb"));
  write_file(other, raw, len);
  free(raw);

  char *err = NULL, want[1024];
  char *e1[] = {"contprof", "merge", "-o", out, a, empty, NULL};
  CHECK_EQ_INT(contprof(e1, NULL, &err), 1);
  snprintf(want, sizeof want, "contprof: merge: %s: empty file\n", empty);
  CHECK_EQ_STR(err, want);
  free(err);
  char *e2[] = {"contprof", "merge", "-o", out, a, other, NULL};
  CHECK_EQ_INT(contprof(e2, NULL, &err), 1);
  snprintf(want, sizeof want,
           "contprof: merge: %s: sample types (alloc_space/bytes, "
           "samples/count) differ from those of %s (samples/count, "
           "cpu/nanoseconds); keep one with --type\n",
           other, a);
  CHECK_EQ_STR(err, want);
  free(err);
  struct stat st;
  CHECK(stat(out, &st) != 0); /* nothing written */
  /* --type keeps the one they share. */
  char *e3[] = {"contprof", "merge", "--type", "samples", "-o",
                out,        a,       other,    NULL};
  CHECK_EQ_INT(contprof(e3, NULL, NULL), 0);
  pprof_profile *m = read_profile(out);
  if (m) {
    flat_profile fm;
    flatten(m, &fm);
    CHECK_EQ_INT(m->n_sample_type, 1);
    CHECK_EQ_INT(fm.total[0], 5 + 2 + 7 + 1 + 4 + 1);
    pprof_profile_free(m);
  }
  char *e4[] = {"contprof", "merge", "--type", "wall", "-o", out, a, NULL};
  CHECK_EQ_INT(contprof(e4, NULL, &err), 1);
  snprintf(want, sizeof want, "contprof: merge: %s: no sample type wall\n", a);
  CHECK_EQ_STR(err, want);
  free(err);
}

/* ---- folded, flame, diff --------------------------------------------------
 */

/* Total per "root;...;leaf" of one value index, summed from a profile. */
static void stack_totals(const pprof_profile *p, int vi, flat_profile *f) {
  memset(f, 0, sizeof *f);
  for (size_t i = 0; i < p->n_sample; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    char key[512] = "";
    for (size_t j = s->n_location_id; j-- > 0;) {
      const Perftools__Profiles__Location *l =
          pprof_find_location(p, s->location_id[j]);
      for (size_t k = l->n_line; k-- > 0;)
        snprintf(key + strlen(key), sizeof key - strlen(key), "%s%s",
                 key[0] ? ";" : "",
                 pprof_str(
                     p, pprof_find_function(p, l->line[k]->function_id)->name));
    }
    size_t at = 0;
    while (at < f->n && strcmp(f->s[at].key, key) != 0)
      at++;
    if (at == f->n && at < 64)
      snprintf(f->s[f->n++].key, sizeof key, "%s", key);
    if (at < 64)
      f->s[at].v[0] += s->value[vi];
    f->total[0] += s->value[vi];
  }
}

/* Parses folded lines into f. */
static void parse_folded(const char *text, flat_profile *f) {
  memset(f, 0, sizeof *f);
  for (const char *line = text; line && *line;) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    const char *sp = memrchr(line, ' ', len);
    CHECK(sp != NULL);
    if (sp && f->n < 64) {
      snprintf(f->s[f->n].key, sizeof f->s[0].key, "%.*s", (int)(sp - line),
               line);
      f->s[f->n].v[0] = strtoll(sp + 1, NULL, 10);
      f->total[0] += f->s[f->n++].v[0];
    }
    line = nl ? nl + 1 : NULL;
  }
}

/* folded of two builds, re-read, has the same total per stack as the
 * profiles (labels folded away), for the default type and for --type. */
static void test_folded_roundtrip(void) {
  char a[256], b[256];
  snprintf(a, sizeof a, "%s", write_build("fa.pb.gz", 0, 1));
  snprintf(b, sizeof b, "%s", write_build("fb.pb.gz", 1, 2));
  pprof_profile *pa = read_profile(a);
  if (!pa)
    return;
  for (int vi = 0; vi < 2; vi++) {
    flat_profile want, got;
    stack_totals(pa, vi, &want);
    char *argv[] = {"contprof", "folded", a, b, NULL, NULL, NULL};
    if (vi == 0)
      argv[4] = "--type", argv[5] = "samples";
    char *out = NULL;
    CHECK_EQ_INT(contprof(argv, &out, NULL), 0);
    parse_folded(out, &got);
    CHECK_EQ_INT(got.n, 4); /* 5 samples, 2 differ only by thread */
    CHECK_EQ_INT(got.total[0], want.total[0] * 3);
    for (size_t i = 0; i < want.n; i++) {
      const flat_sample *s = flat_find(&got, want.s[i].key);
      CHECK(s != NULL);
      if (s)
        CHECK_EQ_INT(s->v[0], want.s[i].v[0] * 3);
    }
    free(out);
  }
  pprof_profile_free(pa);
}

/* A profile whose one function has a hostile name. */
static const char *write_evil(const char *file, const char *name) {
  pprof_builder *pb = pprof_builder_create();
  pprof_add_sample_type(pb, "samples", "count");
  uint64_t f0 = pprof_add_function(pb, "main", "main", "a.c", 1);
  uint64_t f1 = pprof_add_function(pb, name, name, "a.c", 2);
  uint64_t l[2] = {pprof_add_location(pb, 0, 2, f1, 2),
                   pprof_add_location(pb, 0, 1, f0, 1)};
  int64_t v = 3;
  pprof_add_sample(pb, l, 2, &v, 1, NULL, 0);
  uint8_t *raw;
  size_t len;
  CHECK_EQ_INT(pprof_encode(pb, &raw, &len), 0);
  pprof_builder_destroy(pb);
  const char *path = tmp_path(file);
  CHECK_EQ_INT(write_file(path, raw, len), 0);
  free(raw);
  return path;
}

static const char evil[] = "ev;il\nname\x1b[2J</script><script>alert(1)"
                           "</script><!--&\xe2\x80\xa8\xff'\"";

/* Names come from whoever wrote the profile: folded lines stay one line
 * per stack; the page's JSON cannot close its <script>; the SVG is
 * well-formed XML. */
static void test_views_escape_names(void) {
  char in[256], page[256], svg[256];
  snprintf(in, sizeof in, "%s", write_evil("evil.pb", evil));
  snprintf(page, sizeof page, "%s", tmp_path("evil.html"));
  snprintf(svg, sizeof svg, "%s", tmp_path("evil.svg"));
  char *out = NULL;
  char *folded[] = {"contprof", "folded", in, NULL};
  CHECK_EQ_INT(contprof(folded, &out, NULL), 0);
  CHECK_EQ_STR(out, "main;ev?il?name?[2J</script><script>alert(1)</script>"
                    "<!--&\xe2\x80\xa8?'\" 3\n");
  free(out);

  char *flame[] = {"contprof", "flame", "-o", page, in, NULL};
  CHECK_EQ_INT(contprof(flame, NULL, NULL), 0);
  size_t len;
  char *html = slurp(page, &len);
  CHECK(strstr(html, "<script>alert") == NULL);
  CHECK(strstr(html, "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)"
                     "\\u003c/script\\u003e\\u003c!--\\u0026\\u2028\xef\xbf"
                     "\xbd'\\\"") != NULL);
  CHECK(strstr(html, "ev;il\\u000aname\\u001b[2J") != NULL);
  /* Self-contained: nothing is fetched. */
  CHECK(strstr(html, "://") == NULL && strstr(html, "src=") == NULL);
  free(html);

  char *flsvg[] = {"contprof", "flame", "--svg", "-o", svg, in, NULL};
  CHECK_EQ_INT(contprof(flsvg, NULL, NULL), 0);
  char *text = slurp(svg, &len);
  CHECK(strstr(text, "<title>ev;il\xef\xbf\xbdname\xef\xbf\xbd[2J&lt;/script"
                     "&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;!--&amp;"
                     "\xe2\x80\xa8\xef\xbf\xbd&#39;&quot; (3, 100.00%)"
                     "</title>") != NULL);
  free(text);
  int status = -1;
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import sys,xml.dom.minidom as m; "
           "m.parse(sys.argv[1])' '%s'",
           svg);
  free(run(cmd, &status));
  CHECK_EQ_INT(status, 0);
}

/* The page is built in memory within --max-memory too: a 400 kB name of
 * '<' (2.4 MB escaped) does not fit in 2 MiB; one line says so. */
static void test_flame_output_bounded(void) {
  size_t n = 400 << 10;
  char *name = malloc(n + 1);
  memset(name, '<', n);
  name[n] = '\0';
  char in[256], page[256];
  snprintf(in, sizeof in, "%s", write_evil("wide.pb", name));
  free(name);
  snprintf(page, sizeof page, "%s", tmp_path("wide.html"));
  char *argv[] = {"contprof", "flame", "--max-memory", "2", "-o", page,
                  in,         NULL};
  char *err = NULL;
  CHECK_EQ_INT(contprof(argv, NULL, &err), 1);
  CHECK_EQ_STR(err, "contprof: flame: the output is over the 2 MiB of "
                    "--max-memory\n");
  free(err);
  struct stat st;
  CHECK(stat(page, &st) != 0);
  argv[3] = "8"; /* and with room, it is written */
  CHECK_EQ_INT(contprof(argv, NULL, NULL), 0);
  CHECK(stat(page, &st) == 0 && st.st_size > (off_t)(6 * n));
}

/* The flame and diff pages in headless Chromium: each page runs its own
 * self-test when opened with #selftest=FRAME,QUERY: it clicks FRAME
 * (which must then fill the width), searches QUERY, and writes what it
 * saw into <pre id="selftest">, which --dump-dom prints. */
static char *browser_selftest(const char *page, const char *frag) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "timeout 120 chromium --headless --no-sandbox --disable-gpu "
           "--user-data-dir='%s/chromium' --window-size=1000,700 "
           "--virtual-time-budget=5000 --dump-dom 'file://%s#selftest=%s'",
           tmp_dir, page, frag);
  int status = -1;
  char *dom = run(cmd, &status);
  CHECK_EQ_INT(status, 0);
  char *st = dom ? strstr(dom, "<pre id=\"selftest\">") : NULL;
  CHECK(st != NULL);
  if (!st) {
    free(dom);
    return NULL;
  }
  memmove(dom, st, strlen(st) + 1);
  printf("%.*s\n", (int)strcspn(dom, "\n"), dom);
  return dom;
}

static void test_browser(void) {
  int status = -1;
  char *which = run("command -v chromium", &status);
  free(which);
  if (status != 0) {
    printf("note: chromium is not installed (scripts/deps test); skipping "
           "the browser test\n");
    return;
  }
  char a[256], b[256], page[256], dpage[256];
  snprintf(a, sizeof a, "%s", write_build("ba.pb.gz", 0, 1));
  snprintf(b, sizeof b, "%s", write_build("bb.pb.gz", 1, 2));
  snprintf(page, sizeof page, "%s", tmp_path("flame.html"));
  snprintf(dpage, sizeof dpage, "%s", tmp_path("diff.html"));
  char *flame[] = {"contprof", "flame", "-o", page, a, b, NULL};
  CHECK_EQ_INT(contprof(flame, NULL, NULL), 0);
  char *r = browser_selftest(page, "serve,^hash$");
  /* hash: 70 + 10 of 190 ms of cpu in every build. */
  CHECK(r && strstr(r, "\"drawn\":[\"all\",\"hash\",\"main\",\"memcpy\","
                       "\"parse\",\"serve\"]"));
  CHECK(r && strstr(r, "\"zoomed\":\"serve\""));
  CHECK(r && strstr(r, "\"matchedFrames\":2,\"matchedText\":\"Matched: "
                       "42.11%\""));
  /* The zoomed frame fills the canvas. */
  const char *zw = r ? strstr(r, "\"zoomWidth\":") : NULL;
  const char *cw = r ? strstr(r, "\"canvasWidth\":") : NULL;
  CHECK(zw && cw && atoi(zw + 12) == atoi(cw + 14) && atoi(zw + 12) > 500);
  free(r);

  /* The diff: NEW spends everything in main;hash. That frame grew; the
   * others shrank; widths are NEW's. */
  char c[256];
  snprintf(c, sizeof c, "%s", write_evil("dc.pb", "hash"));
  char *diff[] = {"contprof", "diff", "-o", dpage, a, c, NULL};
  CHECK_EQ_INT(contprof(diff, NULL, NULL), 0);
  r = browser_selftest(dpage, "main,mem");
  CHECK(r && strstr(r, "\"drawn\":[\"all\",\"hash\",\"main\"]"));
  CHECK(r && strstr(r, "\"zoomed\":\"main\""));
  CHECK(r && strstr(r, "\"grew\":[\"hash\"],\"shrank\":[\"hash\",\"memcpy\","
                       "\"parse\",\"serve\"]"));
  CHECK(r && strstr(r, "\"matchedText\":\"Matched: 0.00%\""));
  free(r);
}

/* top --base: shares of each total and the change, biggest first. */
static void test_top_base(void) {
  char a[256], c[256];
  snprintf(a, sizeof a, "%s", write_build("ta.pb.gz", 0, 1));
  snprintf(c, sizeof c, "%s", write_evil("tc.pb", "hash"));
  char *argv[] = {"contprof", "top", "--base", a, c, NULL};
  char *out = NULL;
  CHECK_EQ_INT(contprof(argv, &out, NULL), 0);
  printf("%s", out ? out : "");
  /* samples: hash is the leaf of 1 of 19 in a, on the stack of 8 of 19;
   * all of c. parse (7 of 19 flat, 11 cum) is gone. */
  const char *first = out ? strstr(out, "delta\n") : NULL;
  double v[6];
  char name[64];
  CHECK(first && sscanf(first + 6, "%lf%% %lf%% %lf %lf%% %lf%% %lf %63s",
                        &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], name) == 7);
  if (first) {
    CHECK_EQ_STR(name, "hash");
    CHECK_NEAR(v[0], 5.26, 0.001);
    CHECK_NEAR(v[1], 100, 0.001);
    CHECK_NEAR(v[2], 94.74, 0.001);
    CHECK_NEAR(v[3], 42.11, 0.001);
    CHECK_NEAR(v[5], 57.89, 0.001);
  }
  CHECK(out && strstr(out, "    36.84%     0.00%   -36.84     57.89%     "
                           "0.00%   -57.89  parse\n"));
  CHECK(out && strstr(out, "Type: samples\n"));
  free(out);
}

/* Sums are exact or refused: 2^62 alone merges; 2^62 + 2^62 overflows
 * int64 and is one error, not a wrapped or saturated total. */
static void test_merge_refuses_overflow(void) {
  char path[256], out[256];
  pprof_builder *pb = pprof_builder_create();
  pprof_add_sample_type(pb, "bytes", "bytes");
  uint64_t f = pprof_add_function(pb, "big", "big", "a.c", 1);
  uint64_t l = pprof_add_location(pb, 0, 1, f, 1);
  int64_t v = (int64_t)1 << 62;
  pprof_add_sample(pb, &l, 1, &v, 1, NULL, 0);
  uint8_t *raw;
  size_t len;
  CHECK_EQ_INT(pprof_encode(pb, &raw, &len), 0);
  pprof_builder_destroy(pb);
  snprintf(path, sizeof path, "%s", tmp_path("big.pb"));
  snprintf(out, sizeof out, "%s", tmp_path("big_out.pb.gz"));
  CHECK_EQ_INT(write_file(path, raw, len), 0);
  free(raw);
  char *once[] = {"contprof", "merge", "-o", out, path, NULL};
  CHECK_EQ_INT(contprof(once, NULL, NULL), 0);
  unlink(out);
  char *twice[] = {"contprof", "merge", "-o", out, path, path, NULL};
  char *err = NULL, want[512];
  CHECK_EQ_INT(contprof(twice, NULL, &err), 1);
  snprintf(want, sizeof want,
           "contprof: merge: %s: the sum of bytes values overflows a 64-bit "
           "integer\n",
           path);
  CHECK_EQ_STR(err, want);
  free(err);
  struct stat st;
  CHECK(stat(out, &st) != 0);
}

/* diff needs NEW's sample type in BASE, with the same unit. */
static void test_diff_refuses_other_type(void) {
  char a[256], page[256];
  snprintf(a, sizeof a, "%s", write_build("da.pb.gz", 0, 1));
  snprintf(page, sizeof page, "%s", tmp_path("never.html"));
  const char *c = write_evil("dt.pb", "hash"); /* samples/count only */
  char cc[256];
  snprintf(cc, sizeof cc, "%s", c);
  char *argv[] = {"contprof", "diff", "--type", "cpu", "-o", page, a, cc, NULL};
  char *err = NULL, want[600];
  CHECK_EQ_INT(contprof(argv, NULL, &err), 1);
  CHECK_EQ_STR(err, "contprof: diff: no sample type cpu\n");
  free(err);
  char *swapped[] = {"contprof", "diff", "-o", page, cc, a, NULL};
  CHECK_EQ_INT(contprof(swapped, NULL, &err), 1);
  snprintf(want, sizeof want,
           "contprof: diff: %s: no sample type cpu/nanoseconds as in %s\n", cc,
           a);
  CHECK_EQ_STR(err, want);
  free(err);
  struct stat st;
  CHECK(stat(page, &st) != 0);
}

/* A 40 kB file of 10 million samples (1.6 GB decoded) among good ones:
 * each view stops with one line naming it, within the memory budget. */
static void test_views_refuse_sample_bomb(void) {
  static const uint8_t header[] = {0x32, 0x00, 0x32, 0x01, 'n', 0x0a,
                                   0x04, 0x08, 0x01, 0x10, 0x01};
  static const uint8_t sample[] = {0x12, 0x02, 0x10, 0x01};
  char bomb[256], good[256], out[256];
  snprintf(bomb, sizeof bomb, "%s", tmp_path("bomb.pb.gz"));
  write_gzip_repeated(bomb, header, sizeof header, sample, sizeof sample,
                      10000000);
  snprintf(good, sizeof good, "%s", write_build("good.pb.gz", 0, 1));
  snprintf(out, sizeof out, "%s", tmp_path("bomb_out.pb.gz"));
  const char *verbs[] = {"merge", "folded", "flame"};
  for (int v = 0; v < 3; v++) {
    char *argv[] = {"contprof", (char *)verbs[v], "-o", out, good, bomb, NULL};
    char *err = NULL;
    pid_t pid = fork();
    if (pid == 0) {
      int e = open(tmp_path("bomb.err"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(e, 2);
      execv(CP_BUILD_DIR "/contprof", argv);
      _exit(127);
    }
    int st;
    struct rusage ru;
    CHECK(wait4(pid, &st, 0, &ru) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    err = slurp(tmp_path("bomb.err"), NULL);
    char want[512];
    snprintf(want, sizeof want,
             "contprof: %s: %s: profile too large (decoded size over what "
             "the 256 MiB of --max-memory leave)\n",
             verbs[v], bomb);
    CHECK_EQ_STR(err, want);
    printf("note: %s on the 10M-sample bomb: max RSS %ld MiB: %s", verbs[v],
           ru.ru_maxrss >> 10, err ? err : "");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    CHECK(ru.ru_maxrss < (256 + 64) << 10);
#endif
    free(err);
  }
}

/* Mutated profiles (random bytes changed in an uncompressed one) merged
 * after a good one, through the reader thread and its arena: each run
 * exits 0 or 1, never on a signal, with at most one line on stderr. */
static void test_merge_hostile_mutations(void) {
  char good[256], bad[256], out[256];
  snprintf(good, sizeof good, "%s", write_build("mgood.pb.gz", 0, 1));
  snprintf(bad, sizeof bad, "%s", tmp_path("mutated.pb"));
  snprintf(out, sizeof out, "%s", tmp_path("mutated_out.pb.gz"));
  pprof_profile *p = read_profile(good);
  if (!p)
    return;
  size_t len = perftools__profiles__profile__get_packed_size(p);
  uint8_t *raw = malloc(len), *mut = malloc(len);
  perftools__profiles__profile__pack(p, raw);
  pprof_profile_free(p);
  int failed = 0, merged = 0;
  for (int round = 0; round < 150; round++) {
    memcpy(mut, raw, len);
    for (int k = 0; k < 1 + round % 4; k++)
      mut[rng() % len] = (uint8_t)rng();
    CHECK_EQ_INT(write_file(bad, mut, len), 0);
    char *argv[] = {"contprof", "merge", "-o", out, good, bad, NULL};
    char *err = NULL;
    int rc = contprof(argv, NULL, &err);
    CHECK(rc == 0 || rc == 1);
    if (rc == 1) {
      failed++;
      CHECK(err && strncmp(err, "contprof: merge: ", 17) == 0 &&
            strchr(err, '\n') == err + strlen(err) - 1);
    } else {
      merged++;
    }
    free(err);
  }
  printf("note: 150 mutated profiles: %d refused, %d merged\n", failed, merged);
  free(raw);
  free(mut);
}

/* -o writes through what is not a regular file, as a shell's redirection
 * does: a symbolic link's target (the link stays), a FIFO or a device (a
 * rename would have put a regular file in place of /dev/null); a regular
 * file is replaced whole and keeps its mode; a new one is the owner's alone,
 * as the profiles are. */
static void test_output_targets(void) {
  char a[256], target[256], link[256], fifo[256], fresh[256], kept[256];
  snprintf(a, sizeof a, "%s", write_build("targets.pb.gz", 0, 1));
  snprintf(target, sizeof target, "%s", tmp_path("target.folded"));
  snprintf(link, sizeof link, "%s", tmp_path("link.folded"));
  snprintf(fifo, sizeof fifo, "%s", tmp_path("out.fifo"));
  snprintf(fresh, sizeof fresh, "%s", tmp_path("fresh.folded"));
  snprintf(kept, sizeof kept, "%s", tmp_path("kept.folded"));
  char *want = NULL;
  char *to_stdout[] = {"contprof", "folded", "-o", "-", a, NULL};
  CHECK_EQ_INT(contprof(to_stdout, &want, NULL), 0);
  CHECK(want && strlen(want) > 0);

  /* A link: its target gets the text, the link stays a link. */
  FILE *f = fopen(target, "w");
  if (f)
    fclose(f);
  CHECK_EQ_INT(symlink(target, link), 0);
  char *via_link[] = {"contprof", "folded", "-o", link, a, NULL};
  CHECK_EQ_INT(contprof(via_link, NULL, NULL), 0);
  struct stat st;
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
  char *got = slurp(target, NULL);
  CHECK(got && want && strcmp(got, want) == 0);
  free(got);

  /* A FIFO: a reader gets the text, the FIFO stays. */
  CHECK_EQ_INT(mkfifo(fifo, 0600), 0);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "cat %s > %s.read", fifo, fifo);
  FILE *reader = popen(cmd, "r");
  char *to_fifo[] = {"contprof", "folded", "-o", fifo, a, NULL};
  CHECK_EQ_INT(contprof(to_fifo, NULL, NULL), 0);
  if (reader)
    pclose(reader);
  CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  snprintf(cmd, sizeof cmd, "%s.read", fifo);
  got = slurp(cmd, NULL);
  CHECK(got && want && strcmp(got, want) == 0);
  free(got);

  /* A device stays a device: a null device of our own where we may make
   * one (root), never /dev/null itself, which a regression would replace. */
  char dev[256];
  snprintf(dev, sizeof dev, "%s", tmp_path("null.dev"));
  if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0) {
    char *to_dev[] = {"contprof", "merge", "-o", dev, a, NULL};
    CHECK_EQ_INT(contprof(to_dev, NULL, NULL), 0);
    CHECK(lstat(dev, &st) == 0 && S_ISCHR(st.st_mode));
    unlink(dev);
  } else {
    printf("note: cannot make a device node (%s); not checked\n",
           strerror(errno));
  }

  /* New: 0600. Replaced: its mode kept. */
  char *to_fresh[] = {"contprof", "folded", "-o", fresh, a, NULL};
  CHECK_EQ_INT(contprof(to_fresh, NULL, NULL), 0);
  CHECK(stat(fresh, &st) == 0 && (st.st_mode & 07777) == 0600);
  f = fopen(kept, "w");
  if (f)
    fclose(f);
  CHECK_EQ_INT(chmod(kept, 0640), 0);
  char *to_kept[] = {"contprof", "folded", "-o", kept, a, NULL};
  CHECK_EQ_INT(contprof(to_kept, NULL, NULL), 0);
  CHECK(stat(kept, &st) == 0 && (st.st_mode & 07777) == 0640);
  got = slurp(kept, NULL);
  CHECK(got && want && strcmp(got, want) == 0);
  free(got);
  free(want);

  /* top takes a directory as the other commands do. */
  char topdir[256];
  snprintf(topdir, sizeof topdir, "%s", tmp_path("topdir"));
  CHECK_EQ_INT(mkdir(topdir, 0700), 0);
  write_build("topdir/one.pb.gz", 0, 1);
  char *top_dir[] = {"contprof", "top", topdir, NULL};
  char *shown = NULL;
  CHECK_EQ_INT(contprof(top_dir, &shown, NULL), 0);
  CHECK(shown && strstr(shown, "Showing top") != NULL);
  free(shown);

  /* What the views refuse says why: --svg is flame's, diff takes two. */
  char *err = NULL;
  char *folded_svg[] = {"contprof", "folded", "--svg", a, NULL};
  CHECK_EQ_INT(contprof(folded_svg, NULL, &err), 2);
  CHECK(err && strstr(err, "--svg is for contprof flame") != NULL);
  free(err);
  char *diff_one[] = {"contprof", "diff", a, NULL};
  CHECK_EQ_INT(contprof(diff_one, NULL, &err), 2);
  CHECK(err && strstr(err, "needs two inputs, BASE and NEW (got 1)") != NULL);
  free(err);
}

static void test_cleanup(void) { tmp_cleanup(); }

TEST_MAIN(T(test_merge_values), T(test_merge_many), T(test_merge_unsymbolized),
          T(test_merge_inline_chains), T(test_merge_go_top),
          T(test_merge_refuses), T(test_merge_refuses_overflow),
          T(test_folded_roundtrip), T(test_views_escape_names),
          T(test_flame_output_bounded), T(test_browser), T(test_top_base),
          T(test_diff_refuses_other_type), T(test_views_refuse_sample_bomb),
          T(test_merge_hostile_mutations), T(test_output_targets),
          T(test_cleanup))
