/* Reading pprof files back (for `contprof top` and the tests): gunzip with a
 * size bound, decode with protobuf-c, validate the references a reader relies
 * on, small lookups, and the flat/cumulative "top" table of go tool pprof.
 * Hostile input yields -1 and a message, never a crash. A decoded profile is
 * only read, so threads may share it. Never used from signal handlers. */
#ifndef CP_PPROF_READ_H
#define CP_PPROF_READ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "profile.pb-c.h"

typedef Perftools__Profiles__Profile pprof_profile;

/* The largest file, and the largest uncompressed profile, accepted. */
#define PPROF_READ_MAX_BYTES ((size_t)512 << 20)

/* The memory reading one file may take by default: the file, its
 * uncompressed bytes and the decoded profile together. A hostile file of a
 * few kB can otherwise ask for gigabytes (8M empty samples: 32 kB gzipped,
 * 1.3 GB decoded). Our own profiles decode to 8 to 17 times their
 * uncompressed size, so this takes profiles of 15 MB and more; `contprof top
 * --max-memory` raises it. */
#define PPROF_READ_MAX_MEMORY ((size_t)256 << 20)

/* Reads path (gzip-compressed or not), decodes and validates it within
 * PPROF_READ_MAX_MEMORY. On success *out is the profile (free it with
 * pprof_profile_free) and 0 is returned; otherwise -1 with the reason in err
 * (may be NULL): "profile too large (... over the N MiB limit)" past the
 * budget. */
int pprof_read_file(const char *path, pprof_profile **out, char *err,
                    size_t errlen);

/* The same within max_memory bytes; *used (may be NULL) receives what the
 * decoded profile keeps, for a caller that shares one budget among files. */
int pprof_read_file_within(const char *path, size_t max_memory, size_t *used,
                           pprof_profile **out, char *err, size_t errlen);

/* The same with the decoded profile in one arena, stored in *arena when
 * arena is non-NULL: free it with pprof_arena_free(*arena), not with
 * pprof_profile_free. Thousands of small messages freed at once: for
 * commands that read hundreds of files (contprof merge). */
typedef struct pprof_arena pprof_arena;
int pprof_read_file_arena(const char *path, size_t max_memory, size_t *used,
                          pprof_profile **out, pprof_arena **arena, char *err,
                          size_t errlen);
void pprof_arena_free(pprof_arena *arena);

/* The same for a buffer, refusing an uncompressed size over max_bytes, and
 * within PPROF_READ_MAX_MEMORY (besides the caller's buffer). */
int pprof_read_buffer(const uint8_t *data, size_t len, size_t max_bytes,
                      pprof_profile **out, char *err, size_t errlen);

/* Decodes an uncompressed profile and validates it, failing when protobuf-c
 * would need more than max_memory bytes (hostile inputs amplify: an empty
 * Sample is 2 bytes encoded, 80 decoded). pprof_read_buffer allows
 * PPROF_DECODE_MEMORY_FLOOR + PPROF_DECODE_MEMORY_RATIO * size: the profiles
 * of the tests decode to 8 to 17 times their size (tiny ones to 26, which
 * the floor covers). */
#define PPROF_DECODE_MEMORY_FLOOR ((size_t)64 << 20)
#define PPROF_DECODE_MEMORY_RATIO 32
int pprof_decode(const uint8_t *data, size_t len, size_t max_memory,
                 pprof_profile **out, char *err, size_t errlen);

/* Length of the valid UTF-8 sequence at p (1..4) with its code point in
 * *cp, or 0 when invalid (overlong forms, surrogates and code points past
 * U+10FFFF included). Reads at most up to p's terminating NUL. */
size_t pprof_utf8_length(const unsigned char *p, uint32_t *cp);

/* Writes s to out with what a terminal would act on escaped: C0 controls,
 * DEL and C1 controls as \xHH (the C1 ones as their two UTF-8 bytes),
 * bytes that are not valid UTF-8 as \xHH, and the bidirectional overrides
 * and isolates (U+202A..U+202E, U+2066..U+2069) as \uHHHH. A profile's
 * strings are data from whoever wrote the file: printed raw, "\x1b[2J"
 * would clear the reader's screen. */
void pprof_fput_escaped(const char *s, FILE *out);

/* gunzips (gzip or zlib, concatenated gzip members too) into a malloc'd
 * buffer of at most max_out bytes. Returns 0 or -1 with err set. */
int pprof_gunzip(const uint8_t *in, size_t len, size_t max_out, uint8_t **out,
                 size_t *out_len, char *err, size_t errlen);

/* Checks what pprof requires: string_table[0] == "", every string index in
 * range, one value per sample type in every sample, ids non-zero and unique,
 * and every referenced location, mapping and function id defined. */
int pprof_validate(const pprof_profile *p, char *err, size_t errlen);

void pprof_profile_free(pprof_profile *p);

/* string_table[index], or "" when index is out of range. */
const char *pprof_str(const pprof_profile *p, int64_t index);

/* Index of the sample type named type, or -1. */
int pprof_sample_type_index(const pprof_profile *p, const char *type);

/* The sample type go tool pprof shows by default: default_sample_type when
 * set and present, else the last one. -1 when there are none. */
int pprof_default_sample_type_index(const pprof_profile *p);

/* Lookups by id; NULL when absent. Constant time for ids numbered 1..n in
 * order (as written by pprof.c and Go), linear otherwise. */
const Perftools__Profiles__Mapping *pprof_find_mapping(const pprof_profile *p,
                                                       uint64_t id);
const Perftools__Profiles__Function *pprof_find_function(const pprof_profile *p,
                                                         uint64_t id);
const Perftools__Profiles__Location *pprof_find_location(const pprof_profile *p,
                                                         uint64_t id);

/* The function names of a location, innermost (leaf) inline frame first:
 * stores up to max of them in names ("" for a line without a function) and
 * returns how many the location has (0 for an unsymbolized location). */
size_t pprof_location_functions(const pprof_profile *p,
                                const Perftools__Profiles__Location *loc,
                                const char **names, size_t max);

/* Whether a function named `name` is on the sample's stack (any inline
 * frame of any location). */
int pprof_sample_has_function(const pprof_profile *p,
                              const Perftools__Profiles__Sample *s,
                              const char *name);

/* The first label of s with that key, or NULL. */
const Perftools__Profiles__Label *
pprof_sample_label(const pprof_profile *p, const Perftools__Profiles__Sample *s,
                   const char *key);

/* The string of a string label, or NULL for a numeric label. */
const char *pprof_label_str(const pprof_profile *p,
                            const Perftools__Profiles__Label *label);

/* ---- top ----------------------------------------------------------------- */

typedef struct pprof_top_entry {
  char *name;   /* function name ("function file:line" with lines); "[file]"
                 * or "<unknown>" when unsymbolized */
  int64_t flat; /* where it is the leaf */
  int64_t cum;  /* anywhere on the stack, once per sample */
} pprof_top_entry;

typedef struct pprof_top {
  char *type, *unit;         /* the sample type reported */
  int64_t total;             /* sum of |value| over all samples */
  pprof_top_entry *entries;  /* flat descending, then name ascending */
  size_t nentries;           /* functions with a non-zero flat or cum */
  size_t profiles_with_type; /* how many profiles had the type */
} pprof_top;

/* Computes the top table of the sample type named type (NULL: the default
 * of the first profile with sample types) over validated profiles, merged as
 * one; profiles without that type contribute nothing. Returns 0, or -1 with
 * err set (no such type anywhere, units differ between profiles, ENOMEM). */
int pprof_top_compute(const pprof_profile *const *profiles, size_t nprofiles,
                      const char *type, pprof_top *out, char *err,
                      size_t errlen);
/* The same; with lines, one entry per source line like go tool pprof
 * -lines, named "function file:line" (frames without a function keep their
 * "[file]" entry). */
int pprof_top_compute_lines(const pprof_profile *const *profiles,
                            size_t nprofiles, const char *type, int lines,
                            pprof_top *out, char *err, size_t errlen);
void pprof_top_free(pprof_top *top);

#endif
