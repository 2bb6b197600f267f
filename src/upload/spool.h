/* The spool of an HTTP sink: the requests it could not deliver yet, oldest
 * first, bounded by a count and a size (past either bound the oldest is
 * dropped and counted). With a directory, each request queued while the
 * backend fails is also written there (no secrets: headers are added at
 * send time; cp_spool_put_back, cp_spool_persist_all), so a
 * restarted process delivers what the previous one could not; files of a
 * process that is gone are adopted at start. Not thread-safe: its sink
 * serialises access. */
#ifndef CP_SPOOL_H
#define CP_SPOOL_H

#include <stddef.h>
#include <stdint.h>

#define CP_SPOOL_MAX_PARTS 4
#define CP_SPOOL_MAX_TARGET 4096 /* bytes of a target read from a file */

typedef struct cp_spool_part {
  char *name, *filename, *content_type; /* filename, type may be NULL */
  uint8_t *data;
  size_t len;
} cp_spool_part;

typedef struct cp_spool_item {
  struct cp_spool_item *next;
  char *target;   /* path and query, appended to the sink's base URL */
  uint64_t order; /* end of the profile's period, ns: the delivery order */
  size_t nparts;
  cp_spool_part parts[CP_SPOOL_MAX_PARTS];
  size_t bytes;
  char *file; /* its file's name in the spool directory, or NULL */
  int attempts;
  int adopted; /* found in the directory, left by another process */
} cp_spool_item;

typedef struct cp_spool cp_spool;

/* dir may be NULL (memory only). Adopts the files of dead processes. */
cp_spool *cp_spool_create(const char *dir, const char *sink_name,
                          size_t max_items, size_t max_bytes);
/* Frees the memory; files stay for the next process. */
void cp_spool_destroy(cp_spool *s);

/* An empty item for target; NULL on ENOMEM. */
cp_spool_item *cp_spool_item_new(const char *target, uint64_t order);
/* Copies a part into it; 0 or -1. */
int cp_spool_item_add_part(cp_spool_item *it, const char *name,
                           const char *filename, const char *content_type,
                           const uint8_t *data, size_t len);
void cp_spool_item_free(cp_spool_item *it);

/* Queues it (ownership passes), dropping the oldest to stay in bounds;
 * returns how many were dropped. */
size_t cp_spool_push(cp_spool *s, cp_spool_item *it);
/* Removes the oldest for sending (it still counts against the bounds until
 * cp_spool_finish or cp_spool_put_back); NULL when empty. */
cp_spool_item *cp_spool_take(cp_spool *s);
/* Sent or rejected for good: forgets it and removes its file. */
void cp_spool_finish(cp_spool *s, cp_spool_item *it);
/* Not delivered: back at the head, written to the directory. Returns 1 if it
 * was dropped instead (newer profiles filled the spool meanwhile). */
int cp_spool_put_back(cp_spool *s, cp_spool_item *it);
/* Writes every queued item not on disk yet (once the backend failed, and at
 * stop; without a directory, nothing). Returns how many are still in memory
 * only (no directory, or it could not take them). */
size_t cp_spool_persist_all(cp_spool *s);

/* The file format (native byte order: files stay on this machine): a magic,
 * the target, the order, the parts. Encode: 0, or -1 on ENOMEM (*out is
 * malloc'd). Parse: the item (no file name), or NULL when the buffer is
 * malformed, not exactly one item, or names a target that is not a plain
 * path (cp_spool_target_ok); the reader of spool files and fuzz/fuzz_spool.c
 * call it. */
int cp_spool_encode(const cp_spool_item *it, uint8_t **out, size_t *len);
cp_spool_item *cp_spool_parse(const uint8_t *buf, size_t len);
/* 1 when target may be appended to a sink's base URL: empty, or a path that
 * starts with a single '/' and holds only URL path and query characters (no
 * '@', '\', '#', spaces, controls or non-ASCII; '%' with two hex digits),
 * at most CP_SPOOL_MAX_TARGET bytes. A file could otherwise send the sink's
 * credentials to another host ("@evil:9999/x", ".evil.com/x", "//evil/x"). */
int cp_spool_target_ok(const char *target);

size_t cp_spool_count(const cp_spool *s);
/* Whether a request of this process's own (not adopted) is queued or being
 * sent. */
int cp_spool_has_own(const cp_spool *s); /* queued, not counting taken */
uint64_t cp_spool_dropped(const cp_spool *s);

#endif
