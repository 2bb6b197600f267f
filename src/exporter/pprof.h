/* A pprof profile under construction (profile.proto's model: string table,
 * sample types, mappings, functions, locations, samples with labels), kept
 * independent of how bytes are produced: pprof_encode turns it into the wire
 * format with protobuf-c. Samples with the same locations and labels merge.
 * Not thread-safe; never used from signal handlers. */
#ifndef CP_PPROF_H
#define CP_PPROF_H

#include <stddef.h>
#include <stdint.h>

typedef struct pprof_builder pprof_builder;

typedef struct pprof_label {
  const char *key;
  const char *str;      /* string label; NULL for a numeric label */
  int64_t num;          /* numeric value when str is NULL */
  const char *num_unit; /* optional unit of a numeric label, or NULL */
} pprof_label;

pprof_builder *pprof_builder_create(void);
void pprof_builder_destroy(pprof_builder *b);

/* Index of s in the string table (added once; "" is index 0). -1 on ENOMEM. */
int64_t pprof_string(pprof_builder *b, const char *s);

/* Appends a sample type; returns its index or -1 (ENOMEM, or samples were
 * already added: they would lack a value for it). */
int pprof_add_sample_type(pprof_builder *b, const char *type, const char *unit);
void pprof_set_default_sample_type(pprof_builder *b, const char *type);
void pprof_set_period(pprof_builder *b, const char *type, const char *unit,
                      int64_t period);
void pprof_set_time(pprof_builder *b, int64_t time_nanos,
                    int64_t duration_nanos);
void pprof_add_comment(pprof_builder *b, const char *comment);

/* Each returns a non-zero id, or 0 on ENOMEM. Mappings are deduplicated by
 * (start, filename), functions by (name, system_name, filename), locations by
 * (mapping, address, function, line). build_id may be NULL or "". Ids are
 * 1, 2, ... in order of first addition. A location's mapping_id and
 * function_id may be 0 (unknown); an id not returned by this builder gives 0.
 * A location with a function gets one Line; without, none. */
uint64_t pprof_add_mapping(pprof_builder *b, uint64_t start, uint64_t limit,
                           uint64_t file_offset, const char *filename,
                           const char *build_id, int has_functions);
uint64_t pprof_add_function(pprof_builder *b, const char *name,
                            const char *system_name, const char *filename,
                            int64_t start_line);
uint64_t pprof_add_location(pprof_builder *b, uint64_t mapping_id,
                            uint64_t address, uint64_t function_id,
                            int64_t line);

/* One Line of a location: a function and a line in it (0: unknown). */
typedef struct pprof_line {
  uint64_t function_id;
  int64_t line;
} pprof_line;

/* The most Lines a location takes (an inline chain deeper than this is cut
 * by the caller). */
#define PPROF_MAX_LINES 64

/* A location with several Lines, pprof's order: the innermost inlined
 * function first, the function it was inlined into last. Deduplicated by
 * (mapping, address, lines). 0 on ENOMEM, an unknown id or too many lines. */
uint64_t pprof_add_location_lines(pprof_builder *b, uint64_t mapping_id,
                                  uint64_t address, const pprof_line *lines,
                                  size_t nlines);

/* Adds (or merges into an identical) sample: same location ids in the same
 * order and the same set of labels, in any order; values are summed
 * (saturating). location_ids leaf first, each returned by
 * pprof_add_location; values one per sample type. Returns 0 or -1 on ENOMEM /
 * wrong value count / unknown location id. */
int pprof_add_sample(pprof_builder *b, const uint64_t *location_ids,
                     size_t nlocations, const int64_t *values, size_t nvalues,
                     const pprof_label *labels, size_t nlabels);

size_t pprof_sample_count(const pprof_builder *b);

/* A copy of b with at most keep + 1 samples: the keep heaviest (by their
 * share of each sample type's total) as they are, the others summed into one
 * sample whose only frame is a function named other_name, without labels, so
 * that every total stays exact. Only the mappings, functions and locations
 * the kept samples use are copied. b is not changed; NULL on ENOMEM. */
pprof_builder *pprof_fold(const pprof_builder *b, size_t keep,
                          const char *other_name);

/* Serialises to the protobuf wire format (uncompressed), into a malloc'd
 * buffer. Returns 0 or -1. */
int pprof_encode(const pprof_builder *b, uint8_t **out, size_t *len);

/* gzip-compresses a buffer into a malloc'd one at level 1 (fast: a
 * profile is made every period). Returns 0 or -1. */
int pprof_gzip(const uint8_t *in, size_t len, uint8_t **out, size_t *out_len);
/* The same at zlib level 0-9 (-1: zlib's default, 6). */
int pprof_gzip_level(const uint8_t *in, size_t len, int level, uint8_t **out,
                     size_t *out_len);

#endif
