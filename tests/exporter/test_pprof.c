/* The pprof builder, encoder and reader: a profile built here is encoded,
 * gzipped, written, read back and compared field by field; the reader is fed
 * hostile input; top's flat/cum values are checked exactly; and go tool pprof
 * must accept the file we write and agree with our top. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "common.h"
#include "exporter/pprof.h"
#include "exporter/pprof_read.h"
#include "profile_files.h"
#include "test.h"

/* ---- helpers ------------------------------------------------------------- */

/* Encodes a hand-made protobuf-c profile (for inputs the builder refuses to
 * make). */
static uint8_t *pack(const Perftools__Profiles__Profile *p, size_t *len) {
  *len = perftools__profiles__profile__get_packed_size(p);
  uint8_t *buf = malloc(*len ? *len : 1);
  if (buf)
    perftools__profiles__profile__pack(p, buf);
  return buf;
}

/* ---- the reference profile ----------------------------------------------- */

typedef struct exp_mapping {
  uint64_t start, limit, offset;
  const char *file, *build_id;
  int has_functions;
} exp_mapping;

static const exp_mapping mappings[] = {
    {0x400000, 0x500000, 0, "/usr/bin/app", "abc123", 1},
    {0x7f0000000000, 0x7f0000100000, 0x1000, "/usr/lib/libc.so", "beef", 1},
    {0x7f0000200000, 0x7f0000202000, 0, "[vdso]", NULL, 0},
};

typedef struct exp_function {
  const char *name, *system_name, *file;
  int64_t start_line;
} exp_function;

static const exp_function functions[] = {
    {"main", "main", "app.c", 10},
    {"work", "_Z4workv", "work.cc", 20},
    {"memcpy", "__memcpy_avx_unaligned", "", 0},
    {"helper", "helper", "app.c", 30},
};

typedef struct exp_location {
  int mapping; /* index in mappings */
  uint64_t address;
  int function; /* index in functions, -1 for none */
  int64_t line;
} exp_location;

enum { L_MAIN, L_WORK, L_MEMCPY, L_VDSO, L_HELPER, NLOC };
static const exp_location locations[NLOC] = {
    [L_MAIN] = {0, 0x401000, 0, 12},
    [L_WORK] = {0, 0x401100, 1, 25},
    [L_MEMCPY] = {1, 0x7f0000001234, 2, 0},
    [L_VDSO] = {2, 0x7f0000200100, -1, 0},
    [L_HELPER] = {0, 0x401200, 3, 31},
};

typedef struct exp_sample {
  int locs[4];
  size_t nlocs;
  int64_t values[2];
  const pprof_label *labels;
  size_t nlabels;
} exp_sample;

static const pprof_label main_thread[] = {{"thread id", NULL, 1, NULL},
                                          {"thread name", "main", 0, NULL}};
static const pprof_label main_thread_reordered[] = {
    {"thread name", "main", 0, NULL}, {"thread id", NULL, 1, NULL}};
static const pprof_label worker_thread[] = {{"thread id", NULL, 2, NULL},
                                            {"thread name", "worker", 0, NULL}};
static const pprof_label span_42[] = {
    {"span id", NULL, 42, NULL},
    {"end_timestamp_ns", NULL, 123, "nanoseconds"},
    {"trace endpoint", "GET /", 0, NULL}};
static const pprof_label span_43[] = {
    {"span id", NULL, 43, NULL},
    {"end_timestamp_ns", NULL, 123, "nanoseconds"},
    {"trace endpoint", "GET /", 0, NULL}};

/* Added in this order; the duplicates (same stack, same label set in another
 * order) must merge into the first. */
static const exp_sample added[] = {
    {{L_MEMCPY, L_WORK, L_MAIN}, 3, {1, 10000000}, main_thread, 2},
    {{L_MEMCPY, L_WORK, L_MAIN}, 3, {2, 20000000}, main_thread_reordered, 2},
    {{L_MEMCPY, L_WORK, L_MAIN}, 3, {4, 40000000}, worker_thread, 2},
    {{L_VDSO, L_WORK, L_MAIN}, 3, {1, 5}, NULL, 0},
    {{L_VDSO, L_WORK, L_MAIN}, 3, {1, 5}, NULL, 0},
    {{L_HELPER, L_MAIN}, 2, {1, 1}, span_42, 3},
    {{L_HELPER, L_MAIN}, 2, {1, 1}, span_43, 3},
    {{0}, 0, {7, 70}, NULL, 0},
};

/* What must come out: index into added[] of the first of a merged group, and
 * the summed values. */
static const struct {
  int first;
  int64_t values[2];
} merged[] = {
    {0, {3, 30000000}}, {2, {4, 40000000}}, {3, {2, 10}},
    {5, {1, 1}},        {6, {1, 1}},        {7, {7, 70}},
};

static uint64_t mapping_ids[3], function_ids[4], location_ids[NLOC];

static pprof_builder *build_reference(void) {
  pprof_builder *b = pprof_builder_create();
  CHECK(b != NULL);
  if (!b)
    return NULL;
  CHECK_EQ_INT(pprof_add_sample_type(b, "cpu-samples", "count"), 0);
  CHECK_EQ_INT(pprof_add_sample_type(b, "cpu-time", "nanoseconds"), 1);
  pprof_set_default_sample_type(b, "cpu-time");
  pprof_set_period(b, "cpu-time", "nanoseconds", 10000000);
  pprof_set_time(b, 1700000000123456789, 60000000000);
  pprof_add_comment(b, "contprof test");
  pprof_add_comment(b, "second comment");
  for (size_t i = 0; i < 3; i++) {
    const exp_mapping *m = &mappings[i];
    mapping_ids[i] = pprof_add_mapping(b, m->start, m->limit, m->offset,
                                       m->file, m->build_id, m->has_functions);
    CHECK_EQ_INT(mapping_ids[i], i + 1);
  }
  for (size_t i = 0; i < 4; i++) {
    const exp_function *f = &functions[i];
    function_ids[i] =
        pprof_add_function(b, f->name, f->system_name, f->file, f->start_line);
    CHECK_EQ_INT(function_ids[i], i + 1);
  }
  for (size_t i = 0; i < NLOC; i++) {
    const exp_location *l = &locations[i];
    location_ids[i] = pprof_add_location(
        b, mapping_ids[l->mapping], l->address,
        l->function >= 0 ? function_ids[l->function] : 0, l->line);
    CHECK_EQ_INT(location_ids[i], i + 1);
  }
  /* Deduplication hands back the first ids. */
  CHECK_EQ_INT(
      pprof_add_mapping(b, 0x400000, 0x500000, 0, "/usr/bin/app", "abc123", 1),
      mapping_ids[0]);
  CHECK_EQ_INT(pprof_add_function(b, "work", "_Z4workv", "work.cc", 20),
               function_ids[1]);
  CHECK_EQ_INT(
      pprof_add_location(b, mapping_ids[1], 0x7f0000001234, function_ids[2], 0),
      location_ids[L_MEMCPY]);
  for (size_t i = 0; i < CP_ARRAY_SIZE(added); i++) {
    const exp_sample *s = &added[i];
    uint64_t ids[4];
    for (size_t j = 0; j < s->nlocs; j++)
      ids[j] = location_ids[s->locs[j]];
    CHECK_EQ_INT(
        pprof_add_sample(b, ids, s->nlocs, s->values, 2, s->labels, s->nlabels),
        0);
  }
  CHECK_EQ_INT(pprof_sample_count(b), CP_ARRAY_SIZE(merged));
  return b;
}

/* Writes the reference profile gzipped to name; returns the path. */
static const char *write_reference(const char *name) {
  pprof_builder *b = build_reference();
  uint8_t *raw = NULL, *gz = NULL;
  size_t raw_len = 0, gz_len = 0;
  CHECK_EQ_INT(pprof_encode(b, &raw, &raw_len), 0);
  CHECK_EQ_INT(pprof_gzip(raw, raw_len, &gz, &gz_len), 0);
  CHECK(gz_len > 18 && gz[0] == 0x1f && gz[1] == 0x8b);
  const char *path = tmp_path(name);
  CHECK_EQ_INT(write_file(path, gz, gz_len), 0);
  free(raw);
  free(gz);
  pprof_builder_destroy(b);
  return path;
}

/* ---- round trip ---------------------------------------------------------- */

static int label_matches(const pprof_profile *p,
                         const Perftools__Profiles__Label *l,
                         const pprof_label *want) {
  if (strcmp(pprof_str(p, l->key), want->key) != 0)
    return 0;
  if (want->str)
    return l->str != 0 && strcmp(pprof_str(p, l->str), want->str) == 0 &&
           l->num == 0 && l->num_unit == 0;
  return l->str == 0 && l->num == want->num &&
         strcmp(pprof_str(p, l->num_unit),
                want->num_unit ? want->num_unit : "") == 0;
}

static int sample_matches(const pprof_profile *p,
                          const Perftools__Profiles__Sample *s,
                          const exp_sample *want) {
  if (s->n_location_id != want->nlocs || s->n_label != want->nlabels)
    return 0;
  for (size_t i = 0; i < want->nlocs; i++)
    if (s->location_id[i] != location_ids[want->locs[i]])
      return 0;
  for (size_t i = 0; i < want->nlabels; i++) {
    int found = 0;
    for (size_t j = 0; j < s->n_label; j++)
      found += label_matches(p, s->label[j], &want->labels[i]);
    if (found != 1)
      return 0;
  }
  return 1;
}

static void check_ids_unique(const uint64_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) {
    CHECK(ids[i] != 0);
    for (size_t j = i + 1; j < n; j++)
      CHECK(ids[i] != ids[j]);
  }
}

static void test_roundtrip(void) {
  const char *path = write_reference("roundtrip.pb.gz");
  pprof_profile *p = NULL;
  char err[256] = "";
  CHECK_EQ_INT(pprof_read_file(path, &p, err, sizeof err), 0);
  if (!p) {
    fprintf(stderr, "read: %s\n", err);
    return;
  }

  CHECK(p->n_string_table > 0);
  CHECK_EQ_STR(p->string_table[0], "");
  for (size_t i = 0; i < p->n_string_table; i++)
    for (size_t j = i + 1; j < p->n_string_table; j++)
      CHECK(strcmp(p->string_table[i], p->string_table[j]) != 0);

  CHECK_EQ_INT(p->n_sample_type, 2);
  CHECK_EQ_STR(pprof_str(p, p->sample_type[0]->type), "cpu-samples");
  CHECK_EQ_STR(pprof_str(p, p->sample_type[0]->unit), "count");
  CHECK_EQ_STR(pprof_str(p, p->sample_type[1]->type), "cpu-time");
  CHECK_EQ_STR(pprof_str(p, p->sample_type[1]->unit), "nanoseconds");
  CHECK_EQ_STR(pprof_str(p, p->default_sample_type), "cpu-time");
  CHECK_EQ_INT(pprof_default_sample_type_index(p), 1);
  CHECK_EQ_INT(pprof_sample_type_index(p, "cpu-samples"), 0);
  CHECK_EQ_INT(pprof_sample_type_index(p, "nope"), -1);
  CHECK(p->period_type != NULL);
  if (p->period_type) {
    CHECK_EQ_STR(pprof_str(p, p->period_type->type), "cpu-time");
    CHECK_EQ_STR(pprof_str(p, p->period_type->unit), "nanoseconds");
  }
  CHECK_EQ_INT(p->period, 10000000);
  CHECK_EQ_INT(p->time_nanos, 1700000000123456789);
  CHECK_EQ_INT(p->duration_nanos, 60000000000);
  CHECK_EQ_INT(p->n_comment, 2);
  if (p->n_comment == 2) {
    CHECK_EQ_STR(pprof_str(p, p->comment[0]), "contprof test");
    CHECK_EQ_STR(pprof_str(p, p->comment[1]), "second comment");
  }
  CHECK_EQ_INT(p->drop_frames, 0);
  CHECK_EQ_INT(p->keep_frames, 0);

  uint64_t ids[16];
  CHECK_EQ_INT(p->n_mapping, 3);
  for (size_t i = 0; i < p->n_mapping && i < 3; i++) {
    const Perftools__Profiles__Mapping *m = p->mapping[i];
    ids[i] = m->id;
    CHECK_EQ_INT(m->id, mapping_ids[i]);
    CHECK(pprof_find_mapping(p, m->id) == m);
    CHECK_EQ_INT(m->memory_start, mappings[i].start);
    CHECK_EQ_INT(m->memory_limit, mappings[i].limit);
    CHECK_EQ_INT(m->file_offset, mappings[i].offset);
    CHECK_EQ_STR(pprof_str(p, m->filename), mappings[i].file);
    CHECK_EQ_STR(pprof_str(p, m->build_id),
                 mappings[i].build_id ? mappings[i].build_id : "");
    CHECK_EQ_INT(m->has_functions, mappings[i].has_functions);
    CHECK(!m->has_filenames && !m->has_line_numbers && !m->has_inline_frames);
  }
  check_ids_unique(ids, p->n_mapping < 3 ? p->n_mapping : 3);

  CHECK_EQ_INT(p->n_function, 4);
  for (size_t i = 0; i < p->n_function && i < 4; i++) {
    const Perftools__Profiles__Function *f = p->function[i];
    ids[i] = f->id;
    CHECK_EQ_INT(f->id, function_ids[i]);
    CHECK(pprof_find_function(p, f->id) == f);
    CHECK_EQ_STR(pprof_str(p, f->name), functions[i].name);
    CHECK_EQ_STR(pprof_str(p, f->system_name), functions[i].system_name);
    CHECK_EQ_STR(pprof_str(p, f->filename), functions[i].file);
    CHECK_EQ_INT(f->start_line, functions[i].start_line);
  }
  check_ids_unique(ids, p->n_function < 4 ? p->n_function : 4);

  CHECK_EQ_INT(p->n_location, NLOC);
  for (size_t i = 0; i < p->n_location && i < NLOC; i++) {
    const Perftools__Profiles__Location *l = p->location[i];
    const exp_location *want = &locations[i];
    ids[i] = l->id;
    CHECK_EQ_INT(l->id, location_ids[i]);
    CHECK(pprof_find_location(p, l->id) == l);
    CHECK_EQ_INT(l->mapping_id, mapping_ids[want->mapping]);
    CHECK_EQ_INT(l->address, want->address);
    CHECK(!l->is_folded);
    const char *names[2];
    size_t n = pprof_location_functions(p, l, names, 2);
    if (want->function < 0) {
      CHECK_EQ_INT(l->n_line, 0);
      CHECK_EQ_INT(n, 0);
    } else {
      CHECK_EQ_INT(l->n_line, 1);
      CHECK_EQ_INT(n, 1);
      if (l->n_line == 1) {
        CHECK_EQ_INT(l->line[0]->function_id, function_ids[want->function]);
        CHECK_EQ_INT(l->line[0]->line, want->line);
        CHECK_EQ_STR(names[0], functions[want->function].name);
      }
    }
  }
  check_ids_unique(ids, p->n_location < NLOC ? p->n_location : NLOC);

  CHECK_EQ_INT(p->n_sample, CP_ARRAY_SIZE(merged));
  for (size_t m = 0; m < CP_ARRAY_SIZE(merged); m++) {
    const exp_sample *want = &added[merged[m].first];
    int found = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
      const Perftools__Profiles__Sample *s = p->sample[i];
      CHECK_EQ_INT(s->n_value, 2);
      if (s->n_value != 2 || !sample_matches(p, s, want))
        continue;
      found++;
      CHECK_EQ_INT(s->value[0], merged[m].values[0]);
      CHECK_EQ_INT(s->value[1], merged[m].values[1]);
    }
    if (found != 1)
      fprintf(stderr, "merged sample %zu found %d times\n", m, found);
    CHECK_EQ_INT(found, 1);
  }

  /* Label helpers on the first sample with a thread name. */
  int seen = 0;
  for (size_t i = 0; i < p->n_sample; i++) {
    const Perftools__Profiles__Label *name =
        pprof_sample_label(p, p->sample[i], "thread name");
    const Perftools__Profiles__Label *tid =
        pprof_sample_label(p, p->sample[i], "thread id");
    if (!name)
      continue;
    seen++;
    CHECK(tid != NULL);
    CHECK(pprof_label_str(p, name) != NULL);
    if (tid) {
      CHECK(pprof_label_str(p, tid) == NULL);
      CHECK_EQ_STR(pprof_label_str(p, name), tid->num == 1 ? "main" : "worker");
    }
    CHECK(pprof_sample_label(p, p->sample[i], "missing") == NULL);
  }
  CHECK_EQ_INT(seen, 2);
  pprof_profile_free(p);
}

static void test_builder_rejects(void) {
  pprof_builder *b = pprof_builder_create();
  CHECK_EQ_INT(pprof_string(b, ""), 0);
  CHECK_EQ_INT(pprof_string(b, NULL), 0);
  int64_t a = pprof_string(b, "a");
  CHECK(a > 0);
  CHECK_EQ_INT(pprof_string(b, "a"), a);
  CHECK_EQ_INT(pprof_add_sample_type(b, "alloc-space", "bytes"), 0);
  CHECK_EQ_INT(pprof_add_location(b, 5, 0x1000, 0, 0), 0); /* no mapping 5 */
  CHECK_EQ_INT(pprof_add_location(b, 0, 0x1000, 9, 0), 0); /* no function 9 */
  uint64_t f = pprof_add_function(b, "f", NULL, NULL, 0);
  uint64_t loc = pprof_add_location(b, 0, 0x1000, f, 3);
  CHECK(f == 1 && loc == 1);
  int64_t two[2] = {1, 2}, one[1] = {5};
  uint64_t bad_loc = 77, zero_loc = 0;
  CHECK_EQ_INT(pprof_add_sample(b, &loc, 1, two, 2, NULL, 0), -1);
  CHECK_EQ_INT(pprof_add_sample(b, &bad_loc, 1, one, 1, NULL, 0), -1);
  CHECK_EQ_INT(pprof_add_sample(b, &zero_loc, 1, one, 1, NULL, 0), -1);
  CHECK_EQ_INT(pprof_sample_count(b), 0);
  CHECK_EQ_INT(pprof_add_sample(b, &loc, 1, one, 1, NULL, 0), 0);
  /* A new type now would leave the sample without its value. */
  CHECK_EQ_INT(pprof_add_sample_type(b, "alloc-samples", "count"), -1);
  /* Values saturate instead of overflowing. */
  int64_t big[1] = {INT64_MAX};
  CHECK_EQ_INT(pprof_add_sample(b, &loc, 1, big, 1, NULL, 0), 0);
  CHECK_EQ_INT(pprof_sample_count(b), 1);
  uint8_t *raw;
  size_t len;
  CHECK_EQ_INT(pprof_encode(b, &raw, &len), 0);
  pprof_profile *p = NULL;
  char err[256];
  CHECK_EQ_INT(pprof_read_buffer(raw, len, 1 << 20, &p, err, sizeof err), 0);
  if (p) {
    CHECK_EQ_INT(p->sample[0]->value[0], INT64_MAX);
    CHECK(p->period_type == NULL);
    pprof_profile_free(p);
  }
  free(raw);
  pprof_builder_destroy(b);
  pprof_builder_destroy(NULL);
}

/* Many entries force the hash tables through several resizes. */
static void test_builder_many(void) {
  pprof_builder *b = pprof_builder_create();
  CHECK_EQ_INT(pprof_add_sample_type(b, "wall-samples", "count"), 0);
  enum { N = 5000 };
  static uint64_t locs[N];
  char name[32];
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "fn_%d", i);
    uint64_t f = pprof_add_function(b, name, name, "many.c", i);
    locs[i] = pprof_add_location(b, 0, 0x1000 + (uint64_t)i, f, i);
    CHECK_EQ_INT(f, i + 1);
    CHECK_EQ_INT(locs[i], i + 1);
  }
  for (int round = 0; round < 3; round++)
    for (int i = 0; i + 3 <= N; i++) {
      int64_t v = 1;
      pprof_label l = {"thread id", NULL, i % 7, NULL};
      CHECK_EQ_INT(pprof_add_sample(b, &locs[i], 3, &v, 1, &l, 1), 0);
    }
  CHECK_EQ_INT(pprof_sample_count(b), N - 2);
  uint8_t *raw;
  size_t len;
  CHECK_EQ_INT(pprof_encode(b, &raw, &len), 0);
  pprof_profile *p = NULL;
  char err[256];
  CHECK_EQ_INT(pprof_read_buffer(raw, len, 64 << 20, &p, err, sizeof err), 0);
  if (p) {
    CHECK_EQ_INT(p->n_sample, N - 2);
    for (size_t i = 0; i < p->n_sample; i++)
      CHECK_EQ_INT(p->sample[i]->value[0], 3);
    /* "", the type and unit, the N names, the file and the label key. */
    CHECK_EQ_INT(p->n_string_table, 1 + 2 + N + 2);
    pprof_profile_free(p);
  }
  free(raw);
  pprof_builder_destroy(b);
}

static void test_gzip_roundtrip(void) {
  static uint8_t data[100000];
  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (uint8_t)(i % 251 < 100 ? i : rng());
  uint8_t *gz, *back;
  size_t gz_len, back_len;
  char err[256];
  CHECK_EQ_INT(pprof_gzip(data, sizeof data, &gz, &gz_len), 0);
  CHECK_EQ_INT(
      pprof_gunzip(gz, gz_len, sizeof data, &back, &back_len, err, sizeof err),
      0);
  CHECK_EQ_INT(back_len, sizeof data);
  CHECK(memcmp(back, data, sizeof data) == 0);
  free(back);
  /* One byte less room than needed is refused. */
  CHECK_EQ_INT(pprof_gunzip(gz, gz_len, sizeof data - 1, &back, &back_len, err,
                            sizeof err),
               -1);
  CHECK(strstr(err, "too large") != NULL);
  /* Two members, as `cat a.gz b.gz` makes. */
  uint8_t *two = malloc(2 * gz_len);
  memcpy(two, gz, gz_len);
  memcpy(two + gz_len, gz, gz_len);
  CHECK_EQ_INT(pprof_gunzip(two, 2 * gz_len, 2 * sizeof data, &back, &back_len,
                            err, sizeof err),
               0);
  CHECK_EQ_INT(back_len, 2 * sizeof data);
  if (back_len == 2 * sizeof data)
    CHECK(memcmp(back + sizeof data, data, sizeof data) == 0);
  free(back);
  free(two);
  free(gz);
  /* Empty input compresses to a valid, empty gzip stream. */
  CHECK_EQ_INT(pprof_gzip(NULL, 0, &gz, &gz_len), 0);
  CHECK_EQ_INT(pprof_gunzip(gz, gz_len, 10, &back, &back_len, err, sizeof err),
               0);
  CHECK_EQ_INT(back_len, 0);
  free(back);
  free(gz);
}

/* ---- hostile input ------------------------------------------------------- */

static void expect_reject(const uint8_t *data, size_t len, size_t max,
                          const char *want_in_err) {
  pprof_profile *p = (pprof_profile *)1;
  char err[256] = "";
  int rc = pprof_read_buffer(data, len, max, &p, err, sizeof err);
  CHECK_EQ_INT(rc, -1);
  CHECK(p == NULL);
  CHECK(err[0] != '\0');
  if (want_in_err && !strstr(err, want_in_err)) {
    fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, want_in_err);
    CHECK(0);
  }
  if (rc == 0)
    pprof_profile_free(p);
}

static void test_hostile_random(void) {
  static uint8_t buf[4096];
  for (int round = 0; round < 300; round++) {
    size_t len = 1 + rng() % sizeof buf;
    for (size_t i = 0; i < len; i++)
      buf[i] = (uint8_t)rng();
    if (round % 3 == 0 && len > 2) { /* and some that look gzipped */
      buf[0] = 0x1f;
      buf[1] = 0x8b;
    }
    expect_reject(buf, len, 1 << 20, NULL);
  }
  expect_reject((const uint8_t *)"", 0, 1 << 20, "empty");
}

/* Flipped bytes in a valid profile must either be rejected or give a profile
 * every helper (and top) can walk safely. */
static void test_hostile_mutations(void) {
  pprof_builder *b = build_reference();
  uint8_t *raw;
  size_t len;
  CHECK_EQ_INT(pprof_encode(b, &raw, &len), 0);
  pprof_builder_destroy(b);
  uint8_t *copy = malloc(len);
  int accepted = 0;
  for (int round = 0; round < 2000; round++) {
    memcpy(copy, raw, len);
    for (int k = 0; k < 1 + round % 4; k++)
      copy[rng() % len] = (uint8_t)rng();
    size_t cut = round % 5 == 0 ? rng() % len : len;
    pprof_profile *p = NULL;
    char err[256];
    if (pprof_read_buffer(copy, cut, 1 << 20, &p, err, sizeof err) != 0) {
      CHECK(err[0] != '\0');
      continue;
    }
    accepted++;
    pprof_top top;
    const pprof_profile *one[1] = {p};
    if (pprof_top_compute(one, 1, NULL, &top, err, sizeof err) == 0)
      pprof_top_free(&top);
    for (size_t i = 0; i < p->n_location; i++) {
      const char *names[4];
      pprof_location_functions(p, p->location[i], names, 4);
    }
    pprof_profile_free(p);
  }
  printf("note: %d of 2000 mutated profiles were still valid\n", accepted);
  free(copy);
  free(raw);
}

static void test_hostile_gzip(void) {
  pprof_builder *b = build_reference();
  uint8_t *raw, *gz;
  size_t len, gz_len;
  CHECK_EQ_INT(pprof_encode(b, &raw, &len), 0);
  CHECK_EQ_INT(pprof_gzip(raw, len, &gz, &gz_len), 0);
  pprof_builder_destroy(b);

  /* Truncated anywhere. */
  for (size_t cut = 2; cut < gz_len; cut += 1 + cut / 8)
    expect_reject(gz, cut, 1 << 20, NULL);
  expect_reject(gz, gz_len - 4, 1 << 20, "truncated");
  /* Garbage after the stream. */
  uint8_t *more = malloc(gz_len + 3);
  memcpy(more, gz, gz_len);
  memcpy(more + gz_len, "xyz", 3);
  expect_reject(more, gz_len + 3, 1 << 20, "trailing");
  free(more);
  /* A trailer that claims 4 GiB of output is not believed, nor allocated. */
  uint8_t *claim = malloc(gz_len);
  memcpy(claim, gz, gz_len);
  claim[gz_len - 4] = claim[gz_len - 3] = claim[gz_len - 2] = 0xff;
  claim[gz_len - 1] = 0xff;
  expect_reject(claim, gz_len, 1 << 20, "corrupt");
  free(claim);
  /* A real bomb: 4 MiB of zeros (a few kB gzipped) against a 1 MiB limit. */
  uint8_t *zeros = calloc(4 << 20, 1), *bomb;
  size_t bomb_len;
  CHECK_EQ_INT(pprof_gzip_level(zeros, 4 << 20, 9, &bomb, &bomb_len), 0);
  CHECK(bomb_len < 16 << 10);
  expect_reject(bomb, bomb_len, 1 << 20, "over the 1 MiB limit");
  free(bomb);
  free(zeros);
  /* And through pprof_read_file, with its 256 MiB budget, from a gzip stream
   * of 513 MiB of zeros made piecewise (never held uncompressed). */
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  CHECK_EQ_INT(deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY),
               Z_OK);
  static uint8_t chunk[1 << 20], out[1 << 16];
  const char *path = tmp_path("bomb.pb.gz");
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  for (int i = 0; f && i <= 513; i++) {
    zs.next_in = chunk;
    zs.avail_in = i < 513 ? sizeof chunk : 0;
    int flush = i < 513 ? Z_NO_FLUSH : Z_FINISH, zrc;
    do {
      zs.next_out = out;
      zs.avail_out = sizeof out;
      zrc = deflate(&zs, flush);
      fwrite(out, 1, sizeof out - zs.avail_out, f);
    } while (zs.avail_out == 0 || (flush == Z_FINISH && zrc != Z_STREAM_END));
  }
  deflateEnd(&zs);
  if (f)
    fclose(f);
  pprof_profile *p = (pprof_profile *)1;
  char err[256] = "";
  CHECK_EQ_INT(pprof_read_file(path, &p, err, sizeof err), -1);
  CHECK(p == NULL);
  CHECK(strstr(err, "profile too large (uncompressed size over the 256 MiB "
                    "limit)") != NULL);
  free(raw);
  free(gz);
}

/* protobuf-c turns 2 bytes of an empty Sample into 80 bytes of memory; the
 * decoder's budget refuses such amplification instead of exhausting memory. */
static void test_hostile_amplification(void) {
  size_t n = 100000;
  uint8_t *buf = malloc(2 * n);
  for (size_t i = 0; i < n; i++) {
    buf[2 * i] = 0x12; /* field 2 (sample), length-delimited */
    buf[2 * i + 1] = 0;
  }
  pprof_profile *p = (pprof_profile *)1;
  char err[256] = "";
  CHECK_EQ_INT(pprof_decode(buf, 2 * n, 4 << 20, &p, err, sizeof err), -1);
  CHECK(p == NULL);
  CHECK(strstr(err, "too large (decoded size over the 4 MiB limit)") != NULL);
  /* With room enough it decodes, and fails validation instead. */
  CHECK_EQ_INT(pprof_decode(buf, 2 * n, 64 << 20, &p, err, sizeof err), -1);
  CHECK(strstr(err, "string table") != NULL);
  free(buf);
}

/* A minimal valid profile built with protobuf-c, which the cases below break
 * one field at a time. */
typedef struct handmade {
  char *strings[5];
  Perftools__Profiles__ValueType vt, *vtp[1];
  Perftools__Profiles__Function fn, *fnp[1];
  Perftools__Profiles__Line line, *linep[1];
  Perftools__Profiles__Location loc, loc2, *locp[2];
  Perftools__Profiles__Mapping map, *mapp[1];
  uint64_t sample_locs[1];
  int64_t values[2];
  Perftools__Profiles__Label label, *labelp[1];
  Perftools__Profiles__Sample sample, *samplep[1];
  Perftools__Profiles__Profile p;
} handmade;

static void handmade_init(handmade *h) {
  static char s0[] = "", s1[] = "samples", s2[] = "count", s3[] = "f",
              s4[] = "k";
  memset(h, 0, sizeof *h);
  h->strings[0] = s0;
  h->strings[1] = s1;
  h->strings[2] = s2;
  h->strings[3] = s3;
  h->strings[4] = s4;
  perftools__profiles__value_type__init(&h->vt);
  h->vt.type = 1;
  h->vt.unit = 2;
  h->vtp[0] = &h->vt;
  perftools__profiles__function__init(&h->fn);
  h->fn.id = 1;
  h->fn.name = 3;
  h->fnp[0] = &h->fn;
  perftools__profiles__line__init(&h->line);
  h->line.function_id = 1;
  h->linep[0] = &h->line;
  perftools__profiles__mapping__init(&h->map);
  h->map.id = 1;
  h->mapp[0] = &h->map;
  perftools__profiles__location__init(&h->loc);
  h->loc.id = 1;
  h->loc.mapping_id = 1;
  h->loc.n_line = 1;
  h->loc.line = h->linep;
  h->locp[0] = &h->loc;
  perftools__profiles__location__init(&h->loc2);
  h->loc2.id = 2;
  h->locp[1] = &h->loc2;
  h->sample_locs[0] = 1;
  h->values[0] = 1;
  perftools__profiles__label__init(&h->label);
  h->label.key = 4;
  h->label.num = 1;
  h->labelp[0] = &h->label;
  perftools__profiles__sample__init(&h->sample);
  h->sample.n_location_id = 1;
  h->sample.location_id = h->sample_locs;
  h->sample.n_value = 1;
  h->sample.value = h->values;
  h->sample.n_label = 1;
  h->sample.label = h->labelp;
  h->samplep[0] = &h->sample;
  perftools__profiles__profile__init(&h->p);
  h->p.n_string_table = 5;
  h->p.string_table = h->strings;
  h->p.n_sample_type = 1;
  h->p.sample_type = h->vtp;
  h->p.n_function = 1;
  h->p.function = h->fnp;
  h->p.n_mapping = 1;
  h->p.mapping = h->mapp;
  h->p.n_location = 2;
  h->p.location = h->locp;
  h->p.n_sample = 1;
  h->p.sample = h->samplep;
}

static void expect_handmade(const handmade *h, int want_rc,
                            const char *want_in_err) {
  size_t len;
  uint8_t *buf = pack(&h->p, &len);
  if (want_rc == 0) {
    pprof_profile *p = NULL;
    char err[256] = "";
    CHECK_EQ_INT(pprof_read_buffer(buf, len, 1 << 20, &p, err, sizeof err), 0);
    if (err[0])
      fprintf(stderr, "unexpected: %s\n", err);
    pprof_profile_free(p);
  } else {
    expect_reject(buf, len, 1 << 20, want_in_err);
  }
  free(buf);
}

static void test_hostile_invalid(void) {
  handmade h;
  handmade_init(&h);
  expect_handmade(&h, 0, NULL);

  static char not_empty[] = "x";
  handmade_init(&h);
  h.strings[0] = not_empty;
  expect_handmade(&h, -1, "string_table[0]");
  handmade_init(&h);
  h.p.n_string_table = 0;
  h.vt.type = h.vt.unit = h.fn.name = h.label.key = 0;
  expect_handmade(&h, -1, "empty string table");

  handmade_init(&h);
  h.fn.name = 5; /* one past the end */
  expect_handmade(&h, -1, "out of range");
  handmade_init(&h);
  h.fn.system_name = -1;
  expect_handmade(&h, -1, "out of range");
  handmade_init(&h);
  h.label.str = 99;
  expect_handmade(&h, -1, "out of range");
  handmade_init(&h);
  h.p.default_sample_type = 1000;
  expect_handmade(&h, -1, "out of range");

  handmade_init(&h);
  h.sample.n_value = 2;
  expect_handmade(&h, -1, "values");
  handmade_init(&h);
  h.sample_locs[0] = 3;
  expect_handmade(&h, -1, "missing location 3");
  handmade_init(&h);
  h.sample_locs[0] = 0;
  expect_handmade(&h, -1, "missing location 0");
  handmade_init(&h);
  h.line.function_id = 2;
  expect_handmade(&h, -1, "missing function 2");
  handmade_init(&h);
  h.loc.mapping_id = 9;
  expect_handmade(&h, -1, "missing mapping 9");
  handmade_init(&h);
  h.loc2.id = 1;
  expect_handmade(&h, -1, "duplicate location id 1");
  handmade_init(&h);
  h.fn.id = 0;
  h.line.function_id = 0;
  expect_handmade(&h, -1, "function with id 0");
}

static void test_read_file_errors(void) {
  pprof_profile *p;
  char err[256] = "";
  CHECK_EQ_INT(pprof_read_file(tmp_path("does-not-exist"), &p, err, sizeof err),
               -1);
  CHECK(strstr(err, "No such file") != NULL);
  CHECK_EQ_INT(pprof_read_file(tmp_dir, &p, err, sizeof err), -1);
  CHECK(strstr(err, "directory") != NULL);
  const char *empty = tmp_path("empty");
  CHECK_EQ_INT(write_file(empty, "", 0), 0);
  CHECK_EQ_INT(pprof_read_file(empty, &p, err, sizeof err), -1);
  CHECK(strstr(err, "empty") != NULL);
}

/* ---- top ----------------------------------------------------------------- */

static const pprof_top_entry *top_find(const pprof_top *t, const char *name) {
  for (size_t i = 0; i < t->nentries; i++)
    if (strcmp(t->entries[i].name, name) == 0)
      return &t->entries[i];
  return NULL;
}

#define CHECK_TOP(t, name, want_flat, want_cum)                                \
  do {                                                                         \
    const pprof_top_entry *e_ = top_find(t, name);                             \
    CHECK(e_ != NULL);                                                         \
    if (e_) {                                                                  \
      CHECK_EQ_INT(e_->flat, want_flat);                                       \
      CHECK_EQ_INT(e_->cum, want_cum);                                         \
    }                                                                          \
  } while (0)

/* main -> a -> leaf (10), main -> rec -> rec -> rec (5), main -> a -> rec ->
 * b (3), main -> [libx.so] (1), main -> a (0: not listed twice). Types:
 * "samples"/count then "cpu"/nanoseconds = samples * 1000. */
static uint8_t *build_top_profile(size_t *len, int with_default) {
  pprof_builder *b = pprof_builder_create();
  pprof_add_sample_type(b, "samples", "count");
  pprof_add_sample_type(b, "cpu", "nanoseconds");
  if (with_default)
    pprof_set_default_sample_type(b, "samples");
  uint64_t m =
      pprof_add_mapping(b, 0x1000, 0x2000, 0, "/usr/lib/libx.so", "", 0);
  uint64_t fmain = pprof_add_function(b, "main", "", "", 0);
  uint64_t fa = pprof_add_function(b, "a", "", "", 0);
  uint64_t fleaf = pprof_add_function(b, "leaf", "", "", 0);
  uint64_t frec = pprof_add_function(b, "rec", "", "", 0);
  uint64_t fb = pprof_add_function(b, "b", "", "", 0);
  uint64_t lmain = pprof_add_location(b, 0, 1, fmain, 1);
  uint64_t la = pprof_add_location(b, 0, 2, fa, 1);
  uint64_t lleaf = pprof_add_location(b, 0, 3, fleaf, 1);
  uint64_t lrec1 = pprof_add_location(b, 0, 4, frec, 1);
  uint64_t lrec2 = pprof_add_location(b, 0, 5, frec, 2); /* same function */
  uint64_t lb = pprof_add_location(b, 0, 6, fb, 1);
  uint64_t lx = pprof_add_location(b, m, 0x1100, 0, 0);
  struct {
    uint64_t locs[4];
    size_t n;
    int64_t v;
  } s[] = {
      {{lleaf, la, lmain}, 3, 10},
      {{lrec1, lrec2, lrec1, lmain}, 4, 5},
      {{lb, lrec1, la, lmain}, 4, 3},
      {{lx, lmain}, 2, 1},
      {{la, lmain}, 2, 0},
  };
  for (size_t i = 0; i < CP_ARRAY_SIZE(s); i++) {
    int64_t v[2] = {s[i].v, s[i].v * 1000};
    CHECK_EQ_INT(pprof_add_sample(b, s[i].locs, s[i].n, v, 2, NULL, 0), 0);
  }
  uint8_t *raw = NULL;
  CHECK_EQ_INT(pprof_encode(b, &raw, len), 0);
  pprof_builder_destroy(b);
  return raw;
}

static pprof_profile *decode(const uint8_t *raw, size_t len) {
  pprof_profile *p = NULL;
  char err[256];
  if (pprof_read_buffer(raw, len, 1 << 20, &p, err, sizeof err) != 0)
    fprintf(stderr, "decode: %s\n", err);
  CHECK(p != NULL);
  return p;
}

static void test_top_values(void) {
  size_t len;
  uint8_t *raw = build_top_profile(&len, 0);
  pprof_profile *p = decode(raw, len);
  free(raw);
  if (!p)
    return;
  const pprof_profile *one[1] = {p};
  pprof_top t;
  char err[256];
  /* No default: the last type, like go tool pprof. */
  CHECK_EQ_INT(pprof_top_compute(one, 1, NULL, &t, err, sizeof err), 0);
  CHECK_EQ_STR(t.type, "cpu");
  CHECK_EQ_STR(t.unit, "nanoseconds");
  CHECK_EQ_INT(t.total, 19000);
  CHECK_EQ_INT(t.nentries, 6);
  CHECK_TOP(&t, "main", 0, 19000);
  CHECK_TOP(&t, "a", 0, 13000);
  CHECK_TOP(&t, "leaf", 10000, 10000);
  CHECK_TOP(&t, "rec", 5000, 8000); /* 5 + 3, recursion counted once */
  CHECK_TOP(&t, "b", 3000, 3000);
  CHECK_TOP(&t, "[libx.so]", 1000, 1000);
  /* Sorted by flat, then name. */
  const char *order[] = {"leaf", "rec", "b", "[libx.so]", "a", "main"};
  for (size_t i = 0; i < t.nentries && i < 6; i++)
    CHECK_EQ_STR(t.entries[i].name, order[i]);
  CHECK_EQ_INT(t.profiles_with_type, 1);
  pprof_top_free(&t);

  CHECK_EQ_INT(pprof_top_compute(one, 1, "samples", &t, err, sizeof err), 0);
  CHECK_EQ_INT(t.total, 19);
  CHECK_TOP(&t, "rec", 5, 8);
  pprof_top_free(&t);

  CHECK_EQ_INT(pprof_top_compute(one, 1, "nope", &t, err, sizeof err), -1);
  CHECK(strstr(err, "nope") != NULL);

  /* Merged with a second profile (whose default is "samples") and one
   * without the type. */
  raw = build_top_profile(&len, 1);
  pprof_profile *q = decode(raw, len);
  free(raw);
  pprof_builder *b = pprof_builder_create();
  pprof_add_sample_type(b, "alloc-space", "bytes");
  uint64_t f = pprof_add_function(b, "leaf", "", "", 0);
  uint64_t l = pprof_add_location(b, 0, 0, f, 0);
  int64_t v = 100;
  pprof_add_sample(b, &l, 1, &v, 1, NULL, 0);
  CHECK_EQ_INT(pprof_encode(b, &raw, &len), 0);
  pprof_builder_destroy(b);
  pprof_profile *r = decode(raw, len);
  free(raw);
  if (q && r) {
    const pprof_profile *three[3] = {q, r, p};
    CHECK_EQ_INT(pprof_top_compute(three, 3, NULL, &t, err, sizeof err), 0);
    CHECK_EQ_STR(t.type, "samples"); /* the first profile's default */
    CHECK_EQ_INT(t.profiles_with_type, 2);
    CHECK_EQ_INT(t.total, 38);
    CHECK_TOP(&t, "leaf", 20, 20);
    CHECK_TOP(&t, "rec", 10, 16);
    CHECK_TOP(&t, "main", 0, 38);
    pprof_top_free(&t);
  }
  pprof_profile_free(q);
  pprof_profile_free(r);
  pprof_profile_free(p);
}

/* Inline frames: one location with lines [inl, outer]. flat goes to the
 * innermost; both get cum. */
static void test_top_inline(void) {
  handmade h;
  handmade_init(&h);
  static char s5[] = "outer";
  char *strings[6] = {h.strings[0], h.strings[1], h.strings[2],
                      h.strings[3], h.strings[4], s5};
  h.p.string_table = strings;
  h.p.n_string_table = 6;
  Perftools__Profiles__Function outer = h.fn, *fns[2] = {&h.fn, &outer};
  outer.id = 2;
  outer.name = 5;
  Perftools__Profiles__Line line2 = h.line, *lines[2] = {&h.line, &line2};
  line2.function_id = 2;
  h.loc.n_line = 2;
  h.loc.line = lines;
  h.p.n_function = 2;
  h.p.function = fns;
  h.values[0] = 4;
  size_t len;
  uint8_t *raw = pack(&h.p, &len);
  pprof_profile *p = decode(raw, len);
  free(raw);
  if (!p)
    return;
  const char *names[2];
  CHECK_EQ_INT(pprof_location_functions(p, pprof_find_location(p, 1), names, 2),
               2);
  CHECK_EQ_STR(names[0], "f");
  CHECK_EQ_STR(names[1], "outer");
  const pprof_profile *one[1] = {p};
  pprof_top t;
  char err[256];
  CHECK_EQ_INT(pprof_top_compute(one, 1, NULL, &t, err, sizeof err), 0);
  CHECK_EQ_INT(t.total, 4);
  CHECK_TOP(&t, "f", 4, 4);
  CHECK_TOP(&t, "outer", 0, 4);
  pprof_top_free(&t);
  pprof_profile_free(p);
}

/* A location with an inline chain from the builder: its Lines in order
 * (innermost first), deduplicated as a whole, kept by pprof_fold, and an
 * unknown function id refused. */
static void test_builder_location_lines(void) {
  pprof_builder *b = pprof_builder_create();
  pprof_add_sample_type(b, "samples", "count");
  uint64_t inner = pprof_add_function(b, "helper", "helper", "a.c", 10);
  uint64_t outer = pprof_add_function(b, "driver", "driver", "a.c", 30);
  pprof_line chain[2] = {{inner, 12}, {outer, 33}};
  uint64_t l = pprof_add_location_lines(b, 0, 0x1000, chain, 2);
  CHECK(l != 0);
  CHECK_EQ_INT(pprof_add_location_lines(b, 0, 0x1000, chain, 2), l);
  pprof_line other[2] = {{inner, 13}, {outer, 33}};
  CHECK(pprof_add_location_lines(b, 0, 0x1000, other, 2) != l);
  pprof_line bad = {99, 1};
  CHECK_EQ_INT(pprof_add_location_lines(b, 0, 0x1000, &bad, 1), 0);
  int64_t v = 3;
  CHECK_EQ_INT(pprof_add_sample(b, &l, 1, &v, 1, NULL, 0), 0);
  pprof_builder *folded = pprof_fold(b, 1, "[other]");
  CHECK(folded != NULL);
  for (int round = 0; round < 2; round++) {
    uint8_t *raw = NULL;
    size_t len = 0;
    CHECK_EQ_INT(pprof_encode(round ? folded : b, &raw, &len), 0);
    pprof_profile *p = decode(raw, len);
    free(raw);
    if (!p)
      continue;
    const Perftools__Profiles__Location *loc =
        pprof_find_location(p, p->sample[0]->location_id[0]);
    CHECK(loc && loc->n_line == 2);
    if (loc && loc->n_line == 2) {
      const char *names[2];
      pprof_location_functions(p, loc, names, 2);
      CHECK_EQ_STR(names[0], "helper");
      CHECK_EQ_STR(names[1], "driver");
      CHECK_EQ_INT(loc->line[0]->line, 12);
      CHECK_EQ_INT(loc->line[1]->line, 33);
      const Perftools__Profiles__Function *f =
          pprof_find_function(p, loc->line[0]->function_id);
      CHECK_EQ_STR(pprof_str(p, f->filename), "a.c");
      CHECK_EQ_INT(f->start_line, 10);
    }
    pprof_profile_free(p);
  }
  pprof_builder_destroy(folded);
  pprof_builder_destroy(b);
}

/* top with lines: one row per (function, file, line), inlined frames on
 * their own row, flat to the innermost; by function they merge. */
static void test_top_lines(void) {
  pprof_builder *b = pprof_builder_create();
  pprof_add_sample_type(b, "samples", "count");
  uint64_t helper = pprof_add_function(b, "helper", "helper", "a.c", 10);
  uint64_t driver = pprof_add_function(b, "driver", "driver", "a.c", 30);
  pprof_line at12[2] = {{helper, 12}, {driver, 33}};
  pprof_line at13[2] = {{helper, 13}, {driver, 33}};
  uint64_t l12 = pprof_add_location_lines(b, 0, 0x10, at12, 2);
  uint64_t l13 = pprof_add_location_lines(b, 0, 0x20, at13, 2);
  int64_t v3 = 3, v1 = 1;
  CHECK_EQ_INT(pprof_add_sample(b, &l12, 1, &v3, 1, NULL, 0), 0);
  CHECK_EQ_INT(pprof_add_sample(b, &l13, 1, &v1, 1, NULL, 0), 0);
  uint8_t *raw = NULL;
  size_t len = 0;
  CHECK_EQ_INT(pprof_encode(b, &raw, &len), 0);
  pprof_builder_destroy(b);
  pprof_profile *p = decode(raw, len);
  free(raw);
  if (!p)
    return;
  const pprof_profile *one[1] = {p};
  pprof_top t;
  char err[256];
  CHECK_EQ_INT(pprof_top_compute_lines(one, 1, NULL, 1, &t, err, sizeof err),
               0);
  CHECK_EQ_INT(t.nentries, 3);
  CHECK_TOP(&t, "helper a.c:12", 3, 3);
  CHECK_TOP(&t, "helper a.c:13", 1, 1);
  CHECK_TOP(&t, "driver a.c:33", 0, 4);
  pprof_top_free(&t);
  CHECK_EQ_INT(pprof_top_compute_lines(one, 1, NULL, 0, &t, err, sizeof err),
               0);
  CHECK_EQ_INT(t.nentries, 2);
  CHECK_TOP(&t, "helper", 4, 4);
  CHECK_TOP(&t, "driver", 0, 4);
  pprof_top_free(&t);
  pprof_profile_free(p);
}

/* ---- go tool pprof ------------------------------------------------------- */

static void show_stderr(void) {
  FILE *f = fopen(tmp_path("run.err"), "r");
  char line[512];
  while (f && fgets(line, sizeof line, f))
    fprintf(stderr, "  go: %s", line);
  if (f)
    fclose(f);
}

static void test_go_tool_pprof(void) {
  int status = -1;
  char *go = run("command -v go", &status);
  if (!go || status != 0 || !go[0]) {
    printf("note: go is not installed; skipping the go tool pprof check\n");
    free(go);
    return;
  }
  free(go);
  const char *path = write_reference("go_check.pb.gz");
  char cmd[512];
  snprintf(cmd, sizeof cmd, "go tool pprof -raw '%s'", path);
  char *out = run(cmd, &status);
  CHECK_EQ_INT(status, 0);
  if (status != 0)
    show_stderr();
  CHECK(out && strstr(out, "Samples:") && strstr(out, "work") &&
        strstr(out, "thread name") && strstr(out, "cpu-time/nanoseconds"));
  free(out);
  snprintf(cmd, sizeof cmd, "go tool pprof -top '%s'", path);
  out = run(cmd, &status);
  CHECK_EQ_INT(status, 0);
  if (status != 0)
    show_stderr();
  CHECK(out && strstr(out, "Type: cpu-time") && strstr(out, "memcpy"));
  free(out);

  /* go tool pprof -top and our top must agree, value for value. */
  size_t len;
  uint8_t *raw = build_top_profile(&len, 0);
  const char *top_path = tmp_path("go_top.pb");
  CHECK_EQ_INT(write_file(top_path, raw, len), 0);
  pprof_profile *p = decode(raw, len);
  free(raw);
  snprintf(cmd, sizeof cmd,
           "go tool pprof -top -nodefraction=0 -symbolize=none "
           "-sample_index=samples '%s'",
           top_path);
  out = run(cmd, &status);
  CHECK_EQ_INT(status, 0);
  pprof_top t;
  char err[256];
  const pprof_profile *one[1] = {p};
  if (p && out && status == 0 &&
      pprof_top_compute(one, 1, "samples", &t, err, sizeof err) == 0) {
    char *line = strstr(out, "cum%\n");
    size_t rows = 0;
    for (line = line ? line + 5 : NULL; line && *line;) {
      char *next = strchr(line, '\n');
      if (next)
        *next++ = '\0';
      char flat[32], fp[32], sp[32], cum[32], cp[32], name[128];
      if (sscanf(line, "%31s %31s %31s %31s %31s %127s", flat, fp, sp, cum, cp,
                 name) == 6) {
        const pprof_top_entry *e = rows < t.nentries ? &t.entries[rows] : NULL;
        CHECK(e != NULL);
        if (e) {
          CHECK_EQ_STR(e->name, name);
          CHECK_EQ_INT(e->flat, strtoll(flat, NULL, 10));
          CHECK_EQ_INT(e->cum, strtoll(cum, NULL, 10));
        }
        rows++;
      }
      line = next;
    }
    CHECK_EQ_INT(rows, t.nentries);
    pprof_top_free(&t);
  } else {
    show_stderr();
    CHECK(0);
  }
  free(out);
  pprof_profile_free(p);
}

/* ---- contprof top on hostile files --------------------------------------- */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_IS_MEASURABLE 0
#else
#define RSS_IS_MEASURABLE 1
#endif

/* Issue #15 item 8: a 32 kB .pb.gz of 8M one-value samples decoded to
 * 1.28 GB (the budget grew with the input to about 16 GiB). `contprof top`
 * now refuses it within an absolute budget with one line, and still shows
 * the other files it was given. */
static void test_top_refuses_sample_bomb(void) {
  /* string_table "", "n"; sample_type {type 1, unit 1}; then samples
   * {value: [1]} (field 2, 2 bytes: field 2 varint 1). */
  static const uint8_t header[] = {0x32, 0x00, 0x32, 0x01, 'n', 0x0a,
                                   0x04, 0x08, 0x01, 0x10, 0x01};
  static const uint8_t sample[] = {0x12, 0x02, 0x10, 0x01};
  char bomb[256];
  snprintf(bomb, sizeof bomb, "%s", tmp_path("bomb8m.pb.gz"));
  write_gzip_repeated(bomb, header, sizeof header, sample, sizeof sample,
                      (size_t)8 << 20);
  struct stat st;
  CHECK_EQ_INT(stat(bomb, &st), 0);
  CHECK(st.st_size < 64 << 10); /* a few tens of kB */
  char good[256];
  snprintf(good, sizeof good, "%s", write_reference("top_good.pb.gz"));
  char out_path[256], err_path[256];
  snprintf(out_path, sizeof out_path, "%s", tmp_path("top.out"));
  snprintf(err_path, sizeof err_path, "%s", tmp_path("top.err"));

  char *argv[] = {"contprof", "top", bomb, good, NULL};
  long maxrss = 0;
  int rc = run_contprof(argv, out_path, err_path, &maxrss);
  size_t out_len, err_len;
  char *out = slurp(out_path, &out_len), *err = slurp(err_path, &err_len);
  printf("note: contprof top on the 8M-sample bomb: exit %d, max RSS %ld MiB,"
         " stderr: %s",
         rc, maxrss >> 10, err);
  CHECK_EQ_INT(rc, 1);
  char want[512];
  snprintf(want, sizeof want,
           "contprof: top: %s: profile too large (decoded size over the 256 "
           "MiB "
           "limit)\n",
           bomb);
  CHECK_EQ_STR(err, want);
  CHECK(strstr(out, "Showing top") != NULL); /* the good file still */
  /* The budget, plus the program, the file and malloc's slack (not under
   * a sanitizer: its shadow memory and allocator count in the RSS). */
  CHECK(!RSS_IS_MEASURABLE || maxrss < (256 + 64) << 10);

  /* A smaller budget stops it earlier, at its uncompressed size. */
  char *small[] = {"contprof", "top", "--max-memory", "1", bomb, good, NULL};
  CHECK_EQ_INT(run_contprof(small, out_path, err_path, &maxrss), 1);
  free(out);
  free(err);
  out = slurp(out_path, &out_len);
  err = slurp(err_path, &err_len);
  CHECK(strstr(out, "Showing top") != NULL);
  CHECK(strstr(err, "profile too large (uncompressed size over the 1 MiB "
                    "limit)\n") != NULL);
  CHECK(!RSS_IS_MEASURABLE || maxrss < 64 << 10);
  free(out);
  free(err);
}

/* Names come from whoever wrote the file: "\x1b[2J" printed raw would
 * clear the reader's terminal. Controls, DEL, C1, invalid UTF-8 and bidi
 * overrides come out escaped; other UTF-8 as it is. */
static void test_top_escapes_names(void) {
  static const char evil[] = "evil\x1b[2J\a\x7f\xc2\x9b\xff\xe2\x80\xae"
                             "caf\xc3\xa9";
  pprof_builder *b = pprof_builder_create();
  pprof_add_sample_type(b, "samples\x1b]0;owned\x07", "count");
  uint64_t fn = pprof_add_function(b, evil, evil, "x.c", 1);
  uint64_t loc = pprof_add_location(b, 0, 0x1000, fn, 1);
  int64_t v = 5;
  CHECK_EQ_INT(pprof_add_sample(b, &loc, 1, &v, 1, NULL, 0), 0);
  uint8_t *raw;
  size_t len;
  CHECK_EQ_INT(pprof_encode(b, &raw, &len), 0);
  pprof_builder_destroy(b);
  char path[256], out_path[256], err_path[256];
  snprintf(path, sizeof path, "%s", tmp_path("evil.pb"));
  snprintf(out_path, sizeof out_path, "%s", tmp_path("evil.out"));
  snprintf(err_path, sizeof err_path, "%s", tmp_path("evil.err"));
  CHECK_EQ_INT(write_file(path, raw, len), 0);
  free(raw);

  char *argv[] = {"contprof", "top", path, NULL};
  long maxrss;
  CHECK_EQ_INT(run_contprof(argv, out_path, err_path, &maxrss), 0);
  size_t out_len, err_len;
  char *out = slurp(out_path, &out_len), *err = slurp(err_path, &err_len);
  printf("%s", out);
  for (size_t i = 0; i < out_len; i++) {
    unsigned char c = (unsigned char)out[i];
    CHECK(c >= 0x20 || c == '\n');
    CHECK(c != 0x7f && c != 0x9b && c != 0xff);
  }
  CHECK(strstr(out, "evil\\x1b[2J\\x07\\x7f\\xc2\\x9b\\xff\\u202e"
                    "caf\xc3\xa9\n") != NULL);
  CHECK(strstr(out, "Type: samples\\x1b]0;owned\\x07\n") != NULL);
  /* --list-types prints the same strings. */
  char *list[] = {"contprof", "top", "--list-types", path, NULL};
  CHECK_EQ_INT(run_contprof(list, out_path, err_path, &maxrss), 0);
  free(out);
  out = slurp(out_path, &out_len);
  CHECK(strchr(out, 0x1b) == NULL && strchr(out, 0x07) == NULL);
  CHECK(strstr(out, "samples\\x1b]0;owned\\x07/count") != NULL);
  free(out);
  /* An input that cannot be read beside it: reported, the others listed,
   * exit status 1 (it crashed on the missing one). */
  char missing[300];
  snprintf(missing, sizeof missing, "%s.missing", path);
  char *list2[] = {"contprof", "top", "--list-types", missing, path, NULL};
  CHECK_EQ_INT(run_contprof(list2, out_path, err_path, &maxrss), 1);
  out = slurp(out_path, &out_len);
  CHECK(out && strstr(out, "samples\\x1b]0;owned\\x07/count") != NULL);
  free(out);
  free(err);
}

static void test_cleanup(void) { tmp_cleanup(); }

TEST_MAIN(T(test_roundtrip), T(test_builder_rejects), T(test_builder_many),
          T(test_builder_location_lines), T(test_top_lines),
          T(test_gzip_roundtrip), T(test_hostile_random),
          T(test_hostile_mutations), T(test_hostile_gzip),
          T(test_hostile_amplification), T(test_hostile_invalid),
          T(test_read_file_errors), T(test_top_values), T(test_top_inline),
          T(test_go_tool_pprof), T(test_top_refuses_sample_bomb),
          T(test_top_escapes_names), T(test_cleanup))
