/* A bounded little-endian reader over DWARF section bytes, shared by the
 * readers of .debug_line (dwarf_line.c) and .debug_aranges (dwarf.c).
 * A read past the end sets `bad` and returns 0; every later read then
 * fails too, so a caller checks `bad` once after a run of reads. The
 * caller has checked that the ELF is little-endian. */
#ifndef CONTPROF_DWARF_CURSOR_H
#define CONTPROF_DWARF_CURSOR_H

#include <stdint.h>
#include <string.h>

typedef struct dwc_cursor {
  const uint8_t *p, *end;
  int bad;
} dwc_cursor;

/* The bytes left. */
static inline size_t dwc_left(const dwc_cursor *c) {
  return c->bad ? 0 : (size_t)(c->end - c->p);
}

/* An n-byte unsigned value (n <= 8). */
static inline uint64_t dwc_n(dwc_cursor *c, unsigned n) {
  if (c->bad || (size_t)(c->end - c->p) < n) {
    c->bad = 1;
    return 0;
  }
  uint64_t v = 0;
  for (unsigned i = 0; i < n; i++)
    v |= (uint64_t)c->p[i] << (8 * i);
  c->p += n;
  return v;
}

/* Skips n bytes. */
static inline void dwc_skip(dwc_cursor *c, size_t n) {
  if (c->bad || (size_t)(c->end - c->p) < n) {
    c->bad = 1;
    return;
  }
  c->p += n;
}

static inline uint64_t dwc_uleb(dwc_cursor *c) {
  uint64_t v = 0;
  for (unsigned shift = 0; !c->bad; shift += 7) {
    if (c->p >= c->end) {
      c->bad = 1;
      break;
    }
    uint8_t b = *c->p++;
    if (shift < 64)
      v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      break;
  }
  return v;
}

static inline int64_t dwc_sleb(dwc_cursor *c) {
  uint64_t v = 0;
  unsigned shift = 0;
  uint8_t b = 0;
  for (; !c->bad; shift += 7) {
    if (c->p >= c->end) {
      c->bad = 1;
      return 0;
    }
    b = *c->p++;
    if (shift < 64)
      v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      break;
  }
  if (shift + 7 < 64 && (b & 0x40))
    v |= ~(uint64_t)0 << (shift + 7);
  return (int64_t)v;
}

/* A NUL-terminated string at c, inside the cursor's bytes; NULL (and bad)
 * when it is not terminated there. */
static inline const char *dwc_cstr(dwc_cursor *c) {
  if (c->bad)
    return NULL;
  const uint8_t *z = memchr(c->p, 0, (size_t)(c->end - c->p));
  if (!z) {
    c->bad = 1;
    return NULL;
  }
  const char *s = (const char *)c->p;
  c->p = z + 1;
  return s;
}

#endif
