/* `contprof symbolize IN -o OUT`: symbolizes a profile written with
 * CONTPROF_SYMBOLIZE=none (addresses, mappings, build ids) on a machine that
 * has the binaries or their debug files, the way the process would have:
 * the same inline chains, names and module+offset fallbacks (export.c's
 * helpers). Locations that already have lines are copied as they are, but
 * for those named without a line (an object whose debug information the
 * process put off, docs/symbols.md "Short-lived processes"), which get their
 * lines and inline chains where the debug information is found. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aggregator/dwarf.h"
#include "aggregator/symbols.h"
#include "commands.h"
#include "exporter/export.h"
#include "exporter/pprof.h"
#include "exporter/pprof_read.h"
#include "profmerge.h"

#define DEFAULT_DEBUG_DIR "/usr/lib/debug"

static void symbolize_usage(FILE *out) {
  fprintf(out, "usage: contprof symbolize IN -o OUT [--debug-dir DIR]\n"
               "symbolizes a profile made with CONTPROF_SYMBOLIZE=none: each "
               "mapping's file\n(if its build id matches) or DIR/.build-id/"
               "xx/yyyy.debug (DIR: " DEFAULT_DEBUG_DIR ").\n"
               "IN - reads stdin; OUT - writes stdout, else OUT must not "
               "exist.\n");
}

/* Where a mapping's code is read from. */
typedef struct mapping_file {
  int resolved;
  char path[PATH_MAX]; /* "" when nowhere */
} mapping_file;

static void pick_file(const pprof_profile *p,
                      const Perftools__Profiles__Mapping *m,
                      const char *debug_dir, mapping_file *out) {
  out->resolved = 1;
  out->path[0] = '\0';
  const char *path = pprof_str(p, m->filename);
  const char *id = pprof_str(p, m->build_id);
  if (path[0] == '/' && access(path, R_OK) == 0) {
    char fn[2], have[160];
    cp_symbols_resolve_file(path, 0, fn, sizeof fn, have, sizeof have);
    if (id[0] == '\0' || strcmp(have, id) == 0) {
      snprintf(out->path, sizeof out->path, "%s", path);
      return;
    }
  }
  if (strlen(id) > 2) {
    char cand[PATH_MAX];
    int n = snprintf(cand, sizeof cand, "%s/.build-id/%.2s/%s.debug", debug_dir,
                     id, id + 2);
    if (n > 0 && (size_t)n < sizeof cand && access(cand, R_OK) == 0)
      snprintf(out->path, sizeof out->path, "%s", cand);
  }
  if (!out->path[0])
    fprintf(stderr,
            "contprof: symbolize: no file for %s (build id %s): its frames "
            "keep what the profile has (module+offset where unnamed)\n",
            path, id[0] ? id : "none");
}

/* Index of the mapping with id (validated to exist): ids are 1..n in our
 * profiles and Go's, else a search. */
static size_t mapping_index(const pprof_profile *p, uint64_t id) {
  if (id >= 1 && id <= p->n_mapping && p->mapping[id - 1]->id == id)
    return (size_t)id - 1;
  size_t i = 0;
  while (i < p->n_mapping && p->mapping[i]->id != id)
    i++;
  return i;
}

static size_t location_index(const pprof_profile *p, uint64_t id) {
  if (id >= 1 && id <= p->n_location && p->location[id - 1]->id == id)
    return (size_t)id - 1;
  size_t i = 0;
  while (i < p->n_location && p->location[i]->id != id)
    i++;
  return i;
}

/* Where loc's address is in its mapping's file: that file (NULL when none
 * is found) and the address in its ELF address space. */
static const mapping_file *locate(const pprof_profile *p,
                                  const Perftools__Profiles__Mapping *m,
                                  const Perftools__Profiles__Location *loc,
                                  mapping_file *files, const char *debug_dir,
                                  uint64_t *elf_address) {
  mapping_file *f = &files[mapping_index(p, m->id)];
  if (!f->resolved)
    pick_file(p, m, debug_dir, f);
  uint64_t file_offset = loc->address - m->memory_start + m->file_offset;
  if (f->path[0] && cp_symbols_file_address(f->path, m->file_offset,
                                            file_offset, elf_address) == 0)
    return f;
  return NULL;
}

/* The location of an address from f's debug information (its inline chain
 * with lines), or 0 when it has none. */
static uint64_t chain_location(pprof_builder *b, const pprof_profile *p,
                               const Perftools__Profiles__Mapping *m,
                               const mapping_file *f, uint64_t elf_address,
                               uint64_t mapping_id, uint64_t address,
                               cp_line_chain *chain) {
  cp_dwarf_object obj = {.path = f->path,
                         .build_id = pprof_str(p, m->build_id)};
  if (!cp_dwarf_lookup(&obj, elf_address, chain))
    return 0;
  return cp_export_chain_location(b, mapping_id, address, chain);
}

/* The new location of a location without lines. */
static uint64_t symbolize_location(pprof_builder *b, const pprof_profile *p,
                                   const Perftools__Profiles__Location *loc,
                                   uint64_t mapping_id, mapping_file *files,
                                   const char *debug_dir,
                                   cp_line_chain *chain) {
  const Perftools__Profiles__Mapping *m =
      pprof_find_mapping(p, loc->mapping_id);
  if (!m) {
    uint64_t fn = pprof_add_function(b, "[unknown]", "[unknown]", "", 0);
    return fn ? pprof_add_location(b, 0, loc->address, fn, 0) : 0;
  }
  uint64_t elf_address;
  const mapping_file *f = locate(p, m, loc, files, debug_dir, &elf_address);
  if (f) {
    uint64_t id = chain_location(b, p, m, f, elf_address, mapping_id,
                                 loc->address, chain);
    if (id)
      return id;
    char name[4096];
    if (cp_symbols_resolve_file(f->path, elf_address, name, sizeof name, NULL,
                                0) == 0) {
      uint64_t fn = pprof_add_function(b, name, name, "", 0);
      return fn ? pprof_add_location(b, mapping_id, loc->address, fn, 0) : 0;
    }
  }
  char name[320];
  cp_export_module_offset_name(pprof_str(p, m->filename),
                               loc->address - m->memory_start + m->file_offset,
                               name, sizeof name);
  uint64_t fn = pprof_add_function(b, name, name, "", 0);
  return fn ? pprof_add_location(b, mapping_id, loc->address, fn, 0) : 0;
}

/* Whether loc is a native frame named without a line: its function from
 * the symbol table of an object whose debug information was not read. */
static int named_without_line(const pprof_profile *p,
                              const Perftools__Profiles__Location *loc) {
  if (loc->n_line == 0 || !loc->mapping_id || !loc->address ||
      !pprof_find_mapping(p, loc->mapping_id))
    return 0;
  for (size_t i = 0; i < loc->n_line; i++)
    if (loc->line[i]->line != 0)
      return 0;
  return 1;
}

/* The new location of one named without a line: its chain from the debug
 * information when found, else 0 (it is copied). */
static uint64_t add_lines(pprof_builder *b, const pprof_profile *p,
                          const Perftools__Profiles__Location *loc,
                          uint64_t mapping_id, mapping_file *files,
                          const char *debug_dir, cp_line_chain *chain) {
  const Perftools__Profiles__Mapping *m =
      pprof_find_mapping(p, loc->mapping_id);
  uint64_t elf_address;
  const mapping_file *f = locate(p, m, loc, files, debug_dir, &elf_address);
  return f ? chain_location(b, p, m, f, elf_address, mapping_id, loc->address,
                            chain)
           : 0;
}

/* A location that has lines, copied. */
static uint64_t copy_location(pprof_builder *b, const pprof_profile *p,
                              const Perftools__Profiles__Location *loc,
                              uint64_t mapping_id) {
  pprof_line lines[PPROF_MAX_LINES];
  size_t n = 0;
  for (size_t i = 0; i < loc->n_line && n < PPROF_MAX_LINES; i++) {
    const Perftools__Profiles__Function *f =
        pprof_find_function(p, loc->line[i]->function_id);
    if (!f)
      continue;
    uint64_t fn = pprof_add_function(b, pprof_str(p, f->name),
                                     pprof_str(p, f->system_name),
                                     pprof_str(p, f->filename), f->start_line);
    if (!fn)
      return 0;
    lines[n++] = (pprof_line){fn, loc->line[i]->line};
  }
  return pprof_add_location_lines(b, mapping_id, loc->address, lines, n);
}

static pprof_builder *symbolize_profile(const pprof_profile *p,
                                        const char *debug_dir) {
  pprof_builder *b = pprof_builder_create();
  uint64_t *mapping_ids = calloc(p->n_mapping + 1, sizeof *mapping_ids);
  uint64_t *location_ids = calloc(p->n_location + 1, sizeof *location_ids);
  mapping_file *files = calloc(p->n_mapping + 1, sizeof *files);
  cp_line_chain *chain = malloc(sizeof *chain);
  uint64_t *stack = NULL;
  int ok = b && mapping_ids && location_ids && files && chain;
  for (size_t i = 0; ok && i < p->n_sample_type; i++)
    ok = pprof_add_sample_type(b, pprof_str(p, p->sample_type[i]->type),
                               pprof_str(p, p->sample_type[i]->unit)) >= 0;
  if (!ok)
    goto fail;
  if (p->default_sample_type)
    pprof_set_default_sample_type(b, pprof_str(p, p->default_sample_type));
  if (p->period_type)
    pprof_set_period(b, pprof_str(p, p->period_type->type),
                     pprof_str(p, p->period_type->unit), p->period);
  pprof_set_time(b, p->time_nanos, p->duration_nanos);
  for (size_t i = 0; i < p->n_comment; i++)
    pprof_add_comment(b, pprof_str(p, p->comment[i]));
  /* Mappings in their order (the first is the main binary's). */
  for (size_t i = 0; i < p->n_mapping; i++) {
    const Perftools__Profiles__Mapping *m = p->mapping[i];
    mapping_ids[i] = pprof_add_mapping(
        b, m->memory_start, m->memory_limit, m->file_offset,
        pprof_str(p, m->filename), pprof_str(p, m->build_id), 1);
    if (!mapping_ids[i])
      goto fail;
  }
  for (size_t i = 0; i < p->n_location; i++) {
    const Perftools__Profiles__Location *loc = p->location[i];
    uint64_t mapping_id =
        loc->mapping_id ? mapping_ids[mapping_index(p, loc->mapping_id)] : 0;
    location_ids[i] =
        !loc->n_line
            ? symbolize_location(b, p, loc, mapping_id, files, debug_dir, chain)
        : named_without_line(p, loc)
            ? add_lines(b, p, loc, mapping_id, files, debug_dir, chain)
            : 0;
    if (!location_ids[i] && loc->n_line)
      location_ids[i] = copy_location(b, p, loc, mapping_id);
    if (!location_ids[i])
      goto fail;
  }
  size_t max_depth = 0;
  for (size_t i = 0; i < p->n_sample; i++)
    if (p->sample[i]->n_location_id > max_depth)
      max_depth = p->sample[i]->n_location_id;
  stack = calloc(max_depth + 1, sizeof *stack);
  if (!stack)
    goto fail;
  for (size_t i = 0; i < p->n_sample; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    for (size_t d = 0; d < s->n_location_id; d++)
      stack[d] = location_ids[location_index(p, s->location_id[d])];
    pprof_label labels[64];
    size_t nl = 0;
    for (size_t l = 0; l < s->n_label && nl < 64; l++) {
      const Perftools__Profiles__Label *lab = s->label[l];
      labels[nl++] = (pprof_label){
          pprof_str(p, lab->key), lab->str ? pprof_str(p, lab->str) : NULL,
          lab->num, lab->num_unit ? pprof_str(p, lab->num_unit) : NULL};
    }
    if (pprof_add_sample(b, stack, s->n_location_id, s->value, s->n_value,
                         labels, nl) != 0)
      goto fail;
  }
  free(stack);
  free(chain);
  free(files);
  free(location_ids);
  free(mapping_ids);
  return b;
fail:
  free(stack);
  free(chain);
  free(files);
  free(location_ids);
  free(mapping_ids);
  pprof_builder_destroy(b);
  return NULL;
}

/* path "-": stdout (as the other commands write it). Else a new file, the
 * owner's alone as the profiles are. */
static int write_new_file(const char *path, const uint8_t *data, size_t len) {
  if (strcmp(path, "-") == 0) {
    char err[256];
    if (cp_write_output(path, data, len, err, sizeof err) == 0)
      return 0;
    fprintf(stderr, "contprof: symbolize: %s\n", err);
    return -1;
  }
  int fd =
      open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    fprintf(stderr, "contprof: symbolize: cannot create %s: %s\n", path,
            strerror(errno));
    return -1;
  }
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, data + done, len - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      fprintf(stderr, "contprof: symbolize: writing %s: %s\n", path,
              strerror(errno));
      close(fd);
      unlink(path);
      return -1;
    }
    done += (size_t)n;
  }
  return close(fd);
}

int cp_cmd_symbolize(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *debug_dir = DEFAULT_DEBUG_DIR;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (strcmp(argv[i], "--debug-dir") == 0 && i + 1 < argc) {
      debug_dir = argv[++i];
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      symbolize_usage(stdout);
      return 0;
    } else if (!in && (argv[i][0] != '-' || strcmp(argv[i], "-") == 0)) {
      in = argv[i];
    } else {
      if (argv[i][0] == '-')
        fprintf(stderr, "contprof: symbolize: unknown option '%s'%s\n", argv[i],
                strcmp(argv[i], "-o") == 0 ||
                        strcmp(argv[i], "--debug-dir") == 0
                    ? " (it needs a value)"
                    : "");
      else
        fprintf(stderr, "contprof: symbolize: one input only ('%s')\n",
                argv[i]);
      symbolize_usage(stderr);
      return 2;
    }
  }
  if (!in || !out) {
    symbolize_usage(stderr);
    return 2;
  }
  /* Modules are opened by absolute path only. */
  char debug_abs[PATH_MAX];
  if (realpath(debug_dir, debug_abs))
    debug_dir = debug_abs;
  cp_dwarf_set_debug_root(debug_dir);
  pprof_profile *p = NULL;
  char err[256];
  if (pprof_read_file(strcmp(in, "-") == 0 ? "/dev/stdin" : in, &p, err,
                      sizeof err) != 0) {
    fprintf(stderr, "contprof: symbolize: %s: %s\n", in, err);
    return 1;
  }
  pprof_builder *b = symbolize_profile(p, debug_dir);
  pprof_profile_free(p);
  uint8_t *raw = NULL, *gz = NULL;
  size_t raw_len = 0, gz_len = 0;
  int rc = 1;
  if (!b || pprof_encode(b, &raw, &raw_len) != 0 ||
      pprof_gzip(raw, raw_len, &gz, &gz_len) != 0)
    fprintf(stderr, "contprof: symbolize: out of memory\n");
  else if (write_new_file(out, gz, gz_len) == 0)
    rc = 0;
  free(raw);
  free(gz);
  pprof_builder_destroy(b);
  return rc;
}
