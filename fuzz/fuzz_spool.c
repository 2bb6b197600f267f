/* libFuzzer target for the spool file reader (src/upload/spool.c): the input
 * is the content of a spool file, handed to cp_spool_parse as the reader
 * does with a file found in the spool directory (planted ones included).
 * Checks: no crash or leak (ASan, LSan), and an item it accepts has a target
 * that stays on the sink's host (empty, or one '/' then URL path and query
 * characters only), at most CP_SPOOL_MAX_PARTS parts with names and data,
 * and encodes back to exactly the input (one encoding per item). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "upload/spool.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cp_spool_item *it = cp_spool_parse(data, size);
  if (!it)
    return 0;
  const char *t = it->target;
  EXPECT(t && cp_spool_target_ok(t));
  EXPECT(!*t || (t[0] == '/' && t[1] != '/'));
  EXPECT(strlen(t) <= CP_SPOOL_MAX_TARGET);
  for (const char *p = t; *p; p++)
    EXPECT(*p > 0x20 && *p < 0x7f && *p != '@' && *p != '\\' && *p != '#');
  EXPECT(it->nparts <= CP_SPOOL_MAX_PARTS);
  for (size_t i = 0; i < it->nparts; i++)
    EXPECT(it->parts[i].name && it->parts[i].data);
  EXPECT(it->file == NULL);
  uint8_t *out = NULL;
  size_t len = 0;
  if (cp_spool_encode(it, &out, &len) == 0) {
    EXPECT(len == size && memcmp(out, data, size) == 0);
    free(out);
  }
  cp_spool_item_free(it);
  return 0;
}
