/* Merging pprof profiles by function identity (for `contprof merge`,
 * `folded`, `flame`, `diff`): inputs are read one at a time and folded into
 * hash tables keyed by interned strings, so memory is bounded by the merged
 * result, not by the sum of the inputs. Never used from signal handlers. */
#ifndef CP_PROFMERGE_H
#define CP_PROFMERGE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "exporter/pprof_read.h"

typedef struct cp_merge cp_merge;

typedef struct cp_merge_options {
  const char *type;        /* keep only this sample type, or NULL: all */
  const char *drop_labels; /* comma-separated label keys, or NULL */
  int drop_all_labels;     /* for the views: identical stacks fold */
  size_t max_memory;       /* reading one file plus the merged result */
} cp_merge_options;

cp_merge *cp_merge_create(const cp_merge_options *opts);
void cp_merge_destroy(cp_merge *m);

/* Input paths as the commands take them: a file, "-" (/dev/stdin), or a
 * directory, which stands for its *.pb.gz files in name order. */
typedef struct cp_path_list {
  char **v;
  size_t n, cap;
} cp_path_list;
/* Appends path (a directory: its files) to l. 0, or -1 with err set (a
 * directory that cannot be read or has no .pb.gz file; out of memory). */
int cp_path_list_add(cp_path_list *l, const char *path, char *err,
                     size_t errlen);
void cp_path_list_free(cp_path_list *l);

/* Reads every path (a file, or a directory: its *.pb.gz files in name
 * order) and merges them, in order, reading one file ahead in a second
 * thread. Returns 0, or -1 with err set ("PATH: reason"): unreadable or
 * hostile file, sample types that differ from the first input's, a sum
 * that overflows, or the memory budget exceeded. Callers stop on failure. */
int cp_merge_add_paths(cp_merge *m, char *const *paths, size_t n, char *err,
                       size_t errlen);

/* How many profiles were merged. */
size_t cp_merge_count(const cp_merge *m);

/* Writes the merged profile, gzipped, to path ("-": stdout). The file is
 * written beside path and renamed over it, so a reader never sees half. */
int cp_merge_write(cp_merge *m, const char *path, char *err, size_t errlen);

/* ---- reading the merged result (for the flame graph views) ------------- */

size_t cp_merge_ntypes(const cp_merge *m);
const char *cp_merge_type(const cp_merge *m, size_t i);
const char *cp_merge_unit(const cp_merge *m, size_t i);
/* The default sample type's index (the inputs' default when they name one,
 * else the last type), or -1 when nothing was merged. */
int cp_merge_default_type(const cp_merge *m);
/* Index of the type named type, or -1. */
int cp_merge_type_index(const cp_merge *m, const char *type);

/* Calls fn once per merged sample with its frames root first (inline
 * frames expanded: one name per function, unsymbolized locations named
 * "[file]" or "<unknown>" as `contprof top` does) and its values. */
typedef int (*cp_merge_stack_fn)(void *arg, const char *const *frames,
                                 size_t nframes, const int64_t *values);
int cp_merge_each_stack(cp_merge *m, cp_merge_stack_fn fn, void *arg);

/* Writes data to path ("-": stdout): into a new file beside it (O_EXCL,
 * O_NOFOLLOW, relative to its directory opened once), renamed over path. */
int cp_write_output(const char *path, const void *data, size_t len, char *err,
                    size_t errlen);

/* "contprof: PREFIX: MESSAGE" with both escaped, on stderr. */
void cp_report(const char *prefix, const char *message);

/* Progress on stderr, only when it is a terminal and a second has passed
 * since the first call: "\rcontprof: merging 120/200"; _end clears the
 * line. */
void cp_progress(const char *verb, size_t done, size_t total);
void cp_progress_end(void);

#endif
