/* The frame-pointer walker (see fpwalk.h and docs/signals.md, "Frame
 * pointers").
 *
 * A function built with frame pointers keeps, from the end of its prologue
 * (push %rbp; mov %rsp,%rbp) to the start of its epilogue, its caller's rbp
 * at [rbp] and its return address at [rbp + 8]: one step is two loads. The
 * walker takes that step only where it knows it holds:
 *   - the first frame (the interrupted pc, which may be in a prologue, an
 *     epilogue, or a leaf that never made a frame) is stepped with the rule
 *     its object's .eh_frame gives for that exact pc: the CFA (rsp or rbp
 *     plus an offset), where rbp was saved, the return address at CFA - 8;
 *   - a later frame whose return address lies in a function that sets up an
 *     rbp frame (its .eh_frame rules say CFA = rbp + 16 somewhere: looked up
 *     per object when the table is built, off the hot path) takes the rbp
 *     step;
 *   - any other frame (libc on Debian 12, built without frame pointers; our
 *     own library) is stepped with its .eh_frame rule at the return address
 *     minus one, as libunwind would, when that rule is a plain one (CFA from
 *     rsp or rbp, rbp saved at an offset or untouched). Anything else (an
 *     expression rule, a signal frame, an object not in the table, an
 *     encoding we do not read) hands the whole sample to libunwind.
 * Every stack read is 8-byte aligned and inside [sp, stack top) of the stack
 * the interrupted code ran on (the thread's, known from the pthread_create
 * hook or /proc/self/maps for the main thread; the alternate signal stack
 * when sp is there): CFAs strictly increase, rbp frames are 16-byte aligned
 * (the ABI keeps rsp 16-byte aligned at calls). So the walker cannot fault.
 *
 * Rules are cached per pc in a small lock-free table (the same pcs recur
 * from sample to sample). The object table is rebuilt off the hot path when
 * objects are loaded or unloaded; between a dlclose (interposed here, to
 * count them) and the rebuild, `auto` hands every sample to libunwind, so
 * the walker never reads the .eh_frame of an object that is gone. */
#include "fpwalk.h"

#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"
#include "interpose/real.h"
#include "own_fd.h"

#define DW_RBP 6
#define DW_RSP 7
#define DW_RA 16
#define MAX_OBJECTS 2048
#define MAX_CFI_BYTES 65536 /* a CIE or FDE longer than this is refused */
/* An object whose search table and .eh_frame are larger is not classified
 * (the copy build_table reads them from; libstdc++'s are 0.25 MB). */
#define MAX_COPY_BYTES (256u << 20)
#define STATE_STACK 8 /* DW_CFA_remember_state depth */
#define RED_ZONE 128  /* below rsp, the x86-64 psABI's */

/* ---- the thread's stack ------------------------------------------------ */

static CP_TLS uintptr_t stack_lo, stack_hi;

/* Recorded whatever CONTPROF_UNWIND says: the wall sampler's wait hooks
 * read the thread's own stack within them too (wall.c, "Parked
 * threads"). */
void cp_fpwalk_thread_start(void) {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0)
    return;
  void *addr = NULL;
  size_t size = 0;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr && size) {
    stack_lo = (uintptr_t)addr;
    stack_hi = (uintptr_t)addr + size;
  }
  pthread_attr_destroy(&attr);
}

int cp_fpwalk_stack_bounds(uintptr_t *lo, uintptr_t *hi) {
  *lo = stack_lo;
  *hi = stack_hi;
  return stack_hi != 0;
}

/* The top of the main thread's stack without reading /proc/self/maps (a
 * dozen system calls, about 30 us on a VM, in every process that starts):
 * at exec the kernel copies the executable's name (AT_EXECFN) first, so
 * that it ends one pointer below the stack's end, a page boundary. 0 when
 * that does not hold (a loader that made its own stack, such as valgrind's):
 * then the maps are read. */
static uintptr_t stack_top_from_execfn(uintptr_t sp) {
  const char *name = (const char *)getauxval(AT_EXECFN);
  unsigned long page = getauxval(AT_PAGESZ);
  if (!name || !page || (page & (page - 1)))
    return 0;
  uintptr_t top = (uintptr_t)name + strlen(name) + 1 + sizeof(uintptr_t);
  if (top % page || top <= sp || top - sp > ((uintptr_t)1 << 30) ||
      *(const uintptr_t *)(top - sizeof(uintptr_t)) != 0)
    return 0;
  return top;
}

/* The top of [stack] in /proc/self/maps, and its low end: 0 if not found or
 * sp is not in it. */
static uintptr_t stack_top_from_maps(uintptr_t sp, uintptr_t *lo) {
  cp_own_fd own;
  if (cp_own_open(&own, AT_FDCWD, "/proc/self/maps", O_RDONLY, 0, NULL) < 0)
    return 0;
  size_t len;
  char *maps = cp_own_read_all(&own, (size_t)64 << 20, &len);
  cp_own_close(&own);
  if (!maps)
    return 0;
  uintptr_t a = 0, b = 0;
  char *at = strstr(maps, "[stack]\n");
  if (at) {
    while (at > maps && at[-1] != '\n')
      at--;
    unsigned long x, y;
    if (sscanf(at, "%lx-%lx", &x, &y) == 2) {
      a = x;
      b = y;
    }
  }
  free(maps);
  if (!b || sp < a || sp >= b)
    return 0;
  *lo = a;
  return b;
}

/* The main thread's stack: its top (above); its low end moves as it grows,
 * so the bound below is the stack size limit (no other mapping is placed
 * that close below the stack: the kernel keeps the mmap area at least that
 * far away), at most 1 GiB. Called on the main thread only, off the hot
 * path. */
static void main_thread_stack(void) {
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  uintptr_t lo = 0, hi = stack_top_from_execfn(sp);
  if (!hi)
    hi = stack_top_from_maps(sp, &lo);
  if (!hi)
    return;
  if (!lo)
    lo = sp;
  struct rlimit rl;
  uintptr_t span = (uintptr_t)1 << 30;
  if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < span)
    span = rl.rlim_cur;
  if (span < hi - lo)
    span = hi - lo;
  stack_lo = hi - span;
  stack_hi = hi;
}

/* ---- dlclose, counted (by interpose/loader.c's hook) ------------------- */

static atomic_ulong dl_closes;
static int dl_tracking_ok; /* every dlclose comes here (see init) */

void cp_fpwalk_on_dlclose(void) { atomic_fetch_add(&dl_closes, 1); }

/* ---- reading .eh_frame ------------------------------------------------- */

typedef struct rd {
  const uint8_t *p, *end;
  int bad;
  uintptr_t bias; /* where the bytes are loaded, less where they are read */
} rd;

static uint8_t rd_u8(rd *r) {
  if (r->p >= r->end) {
    r->bad = 1;
    return 0;
  }
  return *r->p++;
}

static uint64_t rd_fixed(rd *r, size_t n) {
  if ((size_t)(r->end - r->p) < n) {
    r->bad = 1;
    r->p = r->end;
    return 0;
  }
  uint64_t v = 0;
  memcpy(&v, r->p, n); /* little-endian */
  r->p += n;
  return v;
}

static uint64_t rd_uleb(rd *r) {
  uint64_t v = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    uint8_t b = rd_u8(r);
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return v;
  }
  r->bad = 1;
  return 0;
}

static int64_t rd_sleb(rd *r) {
  int64_t v = 0;
  unsigned shift = 0;
  uint8_t b;
  do {
    b = rd_u8(r);
    if (shift < 64)
      v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
    shift += 7;
  } while ((b & 0x80) && !r->bad && shift < 70);
  if (shift < 64 && (b & 0x40))
    v |= -((int64_t)1 << shift);
  return v;
}

/* A DW_EH_PE-encoded pointer; pcrel and datarel (base `data`) only. */
static int rd_enc(rd *r, uint8_t enc, uintptr_t data, uintptr_t *out) {
  if (enc == 0xff) /* omit */
    return -1;
  uintptr_t at = (uintptr_t)r->p;
  uint64_t v;
  switch (enc & 0x0f) {
  case 0x00:
    v = rd_fixed(r, 8);
    break;
  case 0x01:
    v = rd_uleb(r);
    break;
  case 0x02:
    v = rd_fixed(r, 2);
    break;
  case 0x03:
    v = rd_fixed(r, 4);
    break;
  case 0x04:
    v = rd_fixed(r, 8);
    break;
  case 0x09:
    v = (uint64_t)rd_sleb(r);
    break;
  case 0x0a:
    v = (uint64_t)(int64_t)(int16_t)rd_fixed(r, 2);
    break;
  case 0x0b:
    v = (uint64_t)(int64_t)(int32_t)rd_fixed(r, 4);
    break;
  case 0x0c:
    v = rd_fixed(r, 8);
    break;
  default:
    return -1;
  }
  switch (enc & 0x70) {
  case 0x00:
    break;
  case 0x10:
    v += at + r->bias;
    break;
  case 0x30:
    v += data;
    break;
  default:
    return -1;
  }
  if (enc & 0x80) /* indirect */
    return -1;
  *out = (uintptr_t)v;
  return r->bad ? -1 : 0;
}

/* How the caller's frame is found at one pc. */
typedef struct cfa_rule {
  uint8_t cfa_reg;  /* DW_RSP or DW_RBP; anything else: unsupported */
  uint8_t rbp_how;  /* 0 untouched, 1 saved at CFA + rbp_off, 2 unsupported */
  uint8_t ra_how;   /* 1 at CFA + ra_off, 0 undefined (outermost), 2 unsup. */
  uint8_t cfa_expr; /* the CFA is an expression: unsupported */
  int32_t cfa_off, rbp_off, ra_off;
} cfa_rule;

typedef struct cie_info {
  const uint8_t *insns, *end;
  uint64_t code_align;
  int64_t data_align;
  uint8_t fde_enc;
  uint8_t has_aug_data;
  uint8_t signal_frame;
} cie_info;

static size_t enc_size(uint8_t enc) {
  switch (enc & 0x0f) {
  case 0x02:
  case 0x0a:
    return 2;
  case 0x03:
  case 0x0b:
    return 4;
  case 0x00:
  case 0x04:
  case 0x0c:
    return 8;
  default:
    return 0;
  }
}

/* One CIE or FDE record at p: its body [*body, *end). */
static int record_at(const uint8_t *p, const uint8_t *limit,
                     const uint8_t **body, const uint8_t **end) {
  if (limit - p < 4)
    return -1;
  uint32_t len;
  memcpy(&len, p, 4);
  if (len == 0 || len == 0xffffffffu || len > MAX_CFI_BYTES ||
      (size_t)(limit - p - 4) < len)
    return -1;
  *body = p + 4;
  *end = p + 4 + len;
  return 0;
}

static int parse_cie(const uint8_t *cie, const uint8_t *limit, cie_info *ci) {
  const uint8_t *body, *end;
  if (record_at(cie, limit, &body, &end) != 0)
    return -1;
  rd r = {body, end, 0, 0};
  if (rd_fixed(&r, 4) != 0) /* CIE id */
    return -1;
  uint8_t version = rd_u8(&r);
  if (version != 1 && version != 3)
    return -1;
  const char *aug = (const char *)r.p;
  size_t auglen = strnlen(aug, (size_t)(end - r.p));
  if (auglen == (size_t)(end - r.p))
    return -1;
  r.p += auglen + 1;
  ci->code_align = rd_uleb(&r);
  ci->data_align = rd_sleb(&r);
  uint64_t ra_reg = version == 1 ? rd_u8(&r) : rd_uleb(&r);
  if (ra_reg != DW_RA)
    return -1;
  ci->fde_enc = 0; /* absptr */
  ci->has_aug_data = 0;
  ci->signal_frame = 0;
  if (aug[0] == 'z') {
    uint64_t n = rd_uleb(&r);
    if (r.bad || n > (uint64_t)(end - r.p))
      return -1;
    const uint8_t *aug_end = r.p + n;
    ci->has_aug_data = 1;
    for (size_t i = 1; i < auglen; i++) {
      switch (aug[i]) {
      case 'R':
        ci->fde_enc = rd_u8(&r);
        break;
      case 'L':
        rd_u8(&r);
        break;
      case 'S':
        ci->signal_frame = 1;
        break;
      case 'P': {
        uint8_t penc = rd_u8(&r);
        size_t sz = enc_size(penc);
        if (!sz)
          return -1;
        r.p += sz;
        break;
      }
      default:
        return -1;
      }
    }
    if (r.bad || r.p > aug_end)
      return -1;
    r.p = aug_end;
  } else if (aug[0] != '\0') {
    return -1;
  }
  if (r.bad)
    return -1;
  ci->insns = r.p;
  ci->end = end;
  return 0;
}

typedef struct cfa_state {
  cfa_rule cur, init;
  cfa_rule stack[STATE_STACK];
  int depth;
  int sets_rbp_cfa;    /* CFA = rbp + off somewhere: an rbp-frame function */
  uintptr_t rbp_since; /* where that starts (the end of the prologue) */
} cfa_state;

/* Runs CFA instructions from location loc; stops before the first advance
 * past target (UINTPTR_MAX: runs them all). Returns 0, -1 on an
 * instruction it does not know. */
static int run_cfa(cfa_state *st, const cie_info *ci, const uint8_t *p,
                   const uint8_t *end, uintptr_t loc, uintptr_t target) {
  rd r = {p, end, 0, 0};
  while (r.p < r.end && !r.bad) {
    uint8_t op = rd_u8(&r);
    uint64_t reg = 0, delta = 0;
    int64_t off = 0;
    switch (op >> 6) {
    case 1: /* advance_loc */
      delta = (op & 0x3f) * ci->code_align;
      goto advance;
    case 2: /* offset */
      reg = op & 0x3f;
      off = (int64_t)rd_uleb(&r) * ci->data_align;
      goto set_offset;
    case 3: /* restore */
      reg = op & 0x3f;
      goto restore;
    default:
      break;
    }
    switch (op) {
    case 0x00: /* nop */
      continue;
    case 0x02:
      delta = rd_fixed(&r, 1) * ci->code_align;
      goto advance;
    case 0x03:
      delta = rd_fixed(&r, 2) * ci->code_align;
      goto advance;
    case 0x04:
      delta = rd_fixed(&r, 4) * ci->code_align;
      goto advance;
    case 0x05: /* offset_extended */
      reg = rd_uleb(&r);
      off = (int64_t)rd_uleb(&r) * ci->data_align;
      goto set_offset;
    case 0x11: /* offset_extended_sf */
      reg = rd_uleb(&r);
      off = rd_sleb(&r) * ci->data_align;
      goto set_offset;
    case 0x06: /* restore_extended */
      reg = rd_uleb(&r);
      goto restore;
    case 0x07: /* undefined */
    case 0x08: /* same_value */
      reg = rd_uleb(&r);
      if (reg == DW_RBP)
        st->cur.rbp_how = op == 0x08 ? 0 : 2;
      else if (reg == DW_RA)
        st->cur.ra_how = op == 0x07 ? 0 : 2;
      continue;
    case 0x09: /* register */
      reg = rd_uleb(&r);
      rd_uleb(&r);
      if (reg == DW_RBP)
        st->cur.rbp_how = 2;
      else if (reg == DW_RA)
        st->cur.ra_how = 2;
      continue;
    case 0x0a: /* remember_state */
      if (st->depth == STATE_STACK)
        return -1;
      st->stack[st->depth++] = st->cur;
      continue;
    case 0x0b: /* restore_state */
      if (st->depth == 0)
        return -1;
      st->cur = st->stack[--st->depth];
      continue;
    case 0x0c: /* def_cfa */
      st->cur.cfa_reg = (uint8_t)rd_uleb(&r);
      st->cur.cfa_off = (int32_t)rd_uleb(&r);
      st->cur.cfa_expr = 0;
      break;
    case 0x12: /* def_cfa_sf */
      st->cur.cfa_reg = (uint8_t)rd_uleb(&r);
      st->cur.cfa_off = (int32_t)(rd_sleb(&r) * ci->data_align);
      st->cur.cfa_expr = 0;
      break;
    case 0x0d: /* def_cfa_register */
      st->cur.cfa_reg = (uint8_t)rd_uleb(&r);
      st->cur.cfa_expr = 0;
      break;
    case 0x0e: /* def_cfa_offset */
      st->cur.cfa_off = (int32_t)rd_uleb(&r);
      continue;
    case 0x13: /* def_cfa_offset_sf */
      st->cur.cfa_off = (int32_t)(rd_sleb(&r) * ci->data_align);
      continue;
    case 0x0f: { /* def_cfa_expression */
      uint64_t n = rd_uleb(&r);
      if (n > (uint64_t)(r.end - r.p))
        return -1;
      r.p += n;
      st->cur.cfa_expr = 1;
      continue;
    }
    case 0x10:   /* expression */
    case 0x16: { /* val_expression */
      reg = rd_uleb(&r);
      uint64_t n = rd_uleb(&r);
      if (n > (uint64_t)(r.end - r.p))
        return -1;
      r.p += n;
      if (reg == DW_RBP)
        st->cur.rbp_how = 2;
      else if (reg == DW_RA)
        st->cur.ra_how = 2;
      continue;
    }
    case 0x14: /* val_offset */
    case 0x15: /* val_offset_sf */
      reg = rd_uleb(&r);
      if (op == 0x14)
        rd_uleb(&r);
      else
        rd_sleb(&r);
      if (reg == DW_RBP)
        st->cur.rbp_how = 2;
      else if (reg == DW_RA)
        st->cur.ra_how = 2;
      continue;
    case 0x2e: /* GNU_args_size */
      rd_uleb(&r);
      continue;
    case 0x2f: /* GNU_negative_offset_extended */
      reg = rd_uleb(&r);
      off = -(int64_t)rd_uleb(&r) * ci->data_align;
      goto set_offset;
    default:
      return -1;
    }
    /* A def_cfa* that named a register. */
    if (st->cur.cfa_reg == DW_RBP && !st->sets_rbp_cfa) {
      st->sets_rbp_cfa = 1;
      st->rbp_since = loc;
    }
    continue;
  advance:
    if (target != UINTPTR_MAX && loc + delta > target)
      return 0;
    loc += delta;
    continue;
  set_offset:
    if (reg == DW_RBP) {
      st->cur.rbp_how = 1;
      st->cur.rbp_off = (int32_t)off;
    } else if (reg == DW_RA) {
      st->cur.ra_how = 1;
      st->cur.ra_off = (int32_t)off;
    }
    continue;
  restore:
    if (reg == DW_RBP) {
      st->cur.rbp_how = st->init.rbp_how;
      st->cur.rbp_off = st->init.rbp_off;
    } else if (reg == DW_RA) {
      st->cur.ra_how = st->init.ra_how;
      st->cur.ra_off = st->init.ra_off;
    }
    continue;
  }
  return r.bad ? -1 : 0;
}

/* The rule at `target` from the FDE at fde (target UINTPTR_MAX: the whole
 * function, for sets_rbp_cfa; start and len get its range). [base, limit)
 * bounds the .eh_frame reads; `bias` is 0, or where a copy's bytes are
 * loaded less where the copy is (pc-relative addresses). Returns 0 or
 * -1. */
static int fde_rule(const uint8_t *fde, const uint8_t *base,
                    const uint8_t *limit, uintptr_t bias, uintptr_t target,
                    cfa_state *st, uintptr_t *start, uintptr_t *len) {
  const uint8_t *body, *end;
  if (record_at(fde, limit, &body, &end) != 0)
    return -1;
  uint32_t cie_off;
  memcpy(&cie_off, body, 4);
  if (cie_off == 0 || cie_off > (uintptr_t)(body - base))
    return -1;
  const uint8_t *cie = body - cie_off;
  cie_info ci;
  if (parse_cie(cie, limit, &ci) != 0 || ci.signal_frame)
    return -1;
  rd r = {body + 4, end, 0, bias};
  uintptr_t pc_begin, pc_range;
  if (rd_enc(&r, ci.fde_enc, 0, &pc_begin) != 0 ||
      rd_enc(&r, ci.fde_enc & 0x0f, 0, &pc_range) != 0)
    return -1;
  if (ci.has_aug_data) {
    uint64_t n = rd_uleb(&r);
    if (r.bad || n > (uint64_t)(end - r.p))
      return -1;
    r.p += n;
  }
  *start = pc_begin;
  *len = pc_range;
  if (target != UINTPTR_MAX &&
      (target < pc_begin || target - pc_begin >= pc_range))
    return -1;
  memset(st, 0, sizeof *st);
  st->cur.cfa_reg = DW_RSP;
  st->cur.cfa_off = 8;
  st->cur.ra_how = 1;
  st->cur.ra_off = -8;
  if (run_cfa(st, &ci, ci.insns, ci.end, pc_begin, UINTPTR_MAX) != 0)
    return -1;
  st->init = st->cur;
  st->depth = 0;
  return run_cfa(st, &ci, r.p, end, pc_begin, target);
}

/* ---- the object table -------------------------------------------------- */

typedef struct fp_object {
  uintptr_t lo, hi;     /* its executable segments */
  const uint8_t *hdr;   /* .eh_frame_hdr; NULL: no rules we can read */
  const int32_t *index; /* the header's search table: (pc, fde) pairs */
  size_t nindex;        /* relative to hdr, sorted by pc */
  const uint8_t *eh_lo; /* the .eh_frame bounds we read within */
  const uint8_t *eh_hi;
  int fp;                 /* verdict: most functions make an rbp frame */
  const uint32_t *except; /* (start, end) offsets from lo of the functions */
  size_t nexcept;         /* whose kind is not the verdict, sorted */
  size_t nfuncs, nfp;     /* what the verdict was made from */
  size_t nlong;           /* rbp functions whose frame is made late */
} fp_object;

typedef struct fp_table {
  size_t bytes;                  /* mapped */
  unsigned long long adds, subs; /* dl_iterate_phdr's counters at build */
  unsigned long closes;          /* dl_closes at build */
  unsigned gen;                  /* tags the rule cache's entries */
  size_t n, nfp;
  fp_object obj[]; /* sorted by lo; exception lists after them */
} fp_table;

static _Atomic(fp_table *) table;
/* Walks in progress, counted before they load `table`: a replaced table is
 * unmapped only after each count was seen at 0 (no walk can still hold it).
 * One count per thread id modulo READER_SHARDS, each on its own cache line:
 * a single count was a line that every sampling thread wrote twice a walk
 * (docs/benchmarks.md, "A counter on every walk"). */
#define READER_SHARDS 16
static struct { _Alignas(64) atomic_long n; } readers[READER_SHARDS];
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned table_gen;
/* Walks handed to libunwind. No count of the walks that succeeded: a
 * counter every walk adds to is a cache line every sampling thread writes,
 * a transfer between cores at each sample (docs/benchmarks.md, "A counter
 * on every walk"). */
static atomic_ullong n_fell_back;

/* The longest start of an rbp-frame function before its frame is made
 * that cannot hold a call: endbr64, push %rbp, mov %rsp,%rbp. */
#define PROLOGUE_BYTES 8

/* Classifies o's functions. A return address is in an rbp frame if it lies
 * in a function that makes one, after the point where its rules first say
 * CFA = rbp + off (a call before that, in a function that makes its frame
 * late, is stepped by its rule). Counts (out == NULL: nfuncs, nfp,
 * nexcept) or writes the exceptions to o->fp, sorted: for an object with
 * frame pointers, the functions without, and the starts of those with that
 * are longer than a plain prologue; for one without, the rbp parts of the
 * functions with. Reads a copy of the object's tables (see build_table):
 * `index`, its search table, and `eh`, the bytes of [o->eh_lo, o->eh_hi).
 * May be long; not for handlers. */
static size_t classify(fp_object *o, const int32_t *index, const uint8_t *eh,
                       uint32_t *out) {
  size_t nexcept = 0, nlong = 0;
  uintptr_t eh_lo = (uintptr_t)o->eh_lo, eh_len = (uintptr_t)o->eh_hi - eh_lo;
  for (size_t i = 0; i < o->nindex; i++) {
    uintptr_t at = (uintptr_t)o->hdr + (uintptr_t)(intptr_t)index[2 * i + 1];
    if (at < eh_lo || at - eh_lo >= eh_len)
      continue;
    cfa_state st;
    uintptr_t start, len;
    if (fde_rule(eh + (at - eh_lo), eh, eh + eh_len, eh_lo - (uintptr_t)eh,
                 UINTPTR_MAX, &st, &start, &len) != 0 ||
        start < o->lo || start + len > o->hi || len == 0)
      continue;
    int fp = st.sets_rbp_cfa;
    uintptr_t since = fp ? st.rbp_since : start + len;
    if (since < start || since > start + len)
      since = start; /* rules past the function's end: trust none of it */
    int long_start = fp && since - start > PROLOGUE_BYTES;
    if (!out) {
      o->nfuncs++;
      o->nfp += (size_t)fp;
      nlong += (size_t)long_start;
      continue;
    }
    uintptr_t from = 0, to = 0;
    if (o->fp && !fp) {
      from = start;
      to = start + len;
    } else if (o->fp && long_start) {
      from = start;
      to = since;
    } else if (!o->fp && fp) {
      from = since;
      to = start + len;
    }
    if (from < to) {
      out[2 * nexcept] = (uint32_t)(from - o->lo);
      out[2 * nexcept + 1] = (uint32_t)(to - o->lo);
      nexcept++;
    }
  }
  if (!out)
    o->nlong = nlong;
  return nexcept;
}

/* Objects as dl_iterate_phdr lists them, while building, and the exception
 * lists of all of them in a mapping of the builder's own. */
typedef struct build_ctx {
  fp_object *objs;
  size_t n, cap;
  unsigned long long adds, subs;
  /* Built in passes (see build_table): objects the loader lists before
   * `next` were collected by an earlier pass; `seen` counts this pass's;
   * `changed` says objects came or went since the first pass; `copied`,
   * that the last object collected waits in `copy` to be classified. */
  size_t next, seen;
  int one_pass, changed, copied;
  uint8_t *copy; /* its search table, then its .eh_frame bytes */
  size_t copy_bytes;
  uint32_t *ex;         /* exception words, grown with mremap */
  size_t nex, ex_bytes; /* words used; bytes mapped */
  size_t *ex_at;        /* per object: its first word in ex */
} build_ctx;

/* Classifies o from its tables' copy in b->copy (see collect_object): the
 * verdict, and its exceptions appended to b->ex. Not classified (hdr NULL)
 * when the list cannot grow. */
static void classify_object(build_ctx *b, fp_object *o) {
  const int32_t *index = (const int32_t *)b->copy;
  const uint8_t *eh = b->copy + o->nindex * 2 * sizeof(int32_t);
  classify(o, index, eh, NULL);
  /* The verdict: half or more of the functions with rules make an rbp
   * frame. Built with -fno-omit-frame-pointer, all but a few (leaves
   * without -mno-omit-leaf-frame-pointer, start-up code) do; built
   * without, only those that need one (alloca, variable arrays) do:
   * docs/signals.md gives the counts here. */
  o->fp = o->nfuncs > 0 && 2 * o->nfp >= o->nfuncs;
  o->nexcept = o->fp ? o->nfuncs - o->nfp + o->nlong : o->nfp;
  size_t need = (b->nex + 2 * o->nexcept) * sizeof(uint32_t);
  if (need > b->ex_bytes) {
    size_t bytes = b->ex_bytes;
    while (bytes < need)
      bytes *= 2;
    void *m = mremap(b->ex, b->ex_bytes, bytes, MREMAP_MAYMOVE);
    if (m == MAP_FAILED) {
      o->hdr = NULL;
      o->nexcept = 0;
      return;
    }
    b->ex = m;
    b->ex_bytes = bytes;
  }
  o->nexcept = classify(o, index, eh, b->ex + b->nex); /* same count */
  b->nex += 2 * o->nexcept;
}

/* Copies o's search table and .eh_frame bytes into b->copy, grown as
 * needed. 0 when it cannot grow. */
static int copy_tables(build_ctx *b, const fp_object *o) {
  size_t index_bytes = o->nindex * 2 * sizeof(int32_t);
  size_t eh_bytes = (size_t)(o->eh_hi - o->eh_lo);
  size_t need = index_bytes + eh_bytes;
  if (need > MAX_COPY_BYTES)
    return 0;
  if (need > b->copy_bytes) {
    size_t bytes = b->copy_bytes ? b->copy_bytes : 256 * 1024;
    while (bytes < need)
      bytes *= 2;
    void *m = b->copy ? mremap(b->copy, b->copy_bytes, bytes, MREMAP_MAYMOVE)
                      : mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
      return 0;
    b->copy = m;
    b->copy_bytes = bytes;
  }
  memcpy(b->copy, o->index, index_bytes);
  memcpy(b->copy + index_bytes, o->eh_lo, eh_bytes);
  return 1;
}

static int collect_object(struct dl_phdr_info *info, size_t size, void *arg) {
  build_ctx *b = arg;
  if (size >=
          offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs &&
      b->seen == 0) {
    if (b->next == 0) {
      b->adds = info->dlpi_adds;
      b->subs = info->dlpi_subs;
    } else if (b->adds != info->dlpi_adds || b->subs != info->dlpi_subs) {
      b->changed = 1;
      return 1;
    }
  }
  if (b->seen++ < b->next)
    return 0; /* collected by an earlier pass */
  b->next = b->seen;
  if (b->n == b->cap)
    return 0;
  fp_object o;
  memset(&o, 0, sizeof o);
  o.lo = UINTPTR_MAX;
  size_t hdr_bytes = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
      if (lo < o.lo)
        o.lo = lo;
      if (lo + ph->p_memsz > o.hi)
        o.hi = lo + ph->p_memsz;
    } else if (ph->p_type == PT_GNU_EH_FRAME) {
      o.hdr = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
      hdr_bytes = ph->p_memsz;
    }
  }
  if (o.lo >= o.hi)
    return 0;
  if (o.hdr) {
    /* version 1; eh_frame_ptr pcrel|sdata4; count udata4; table
     * datarel|sdata4: what binutils' and lld's linkers write. */
    const uint8_t *h = o.hdr;
    if (hdr_bytes >= 12 && h[0] == 1 && h[1] == 0x1b && h[2] == 0x03 &&
        h[3] == 0x3b) {
      int32_t eh_rel;
      uint32_t count;
      memcpy(&eh_rel, h + 4, 4);
      memcpy(&count, h + 8, 4);
      o.eh_lo = h + 4 + eh_rel;
      o.index = (const int32_t *)(h + 12);
      o.nindex = count;
      /* .eh_frame lies before or after the header in the same segment;
       * records are bounded by their lengths and MAX_CFI_BYTES, and the
       * segment's end (found below) bounds them all. */
      o.eh_hi = NULL;
      for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (uintptr_t)o.eh_lo >= lo &&
            (uintptr_t)o.eh_lo < lo + ph->p_memsz)
          o.eh_hi = (const uint8_t *)(lo + ph->p_filesz);
      }
      if (!o.eh_hi || o.eh_hi <= o.eh_lo || count == 0 ||
          count > (hdr_bytes - 12) / (2 * sizeof(int32_t)))
        o.hdr = NULL;
    } else {
      o.hdr = NULL;
    }
  }
  /* Copied here, while dl_iterate_phdr holds the loader's lock, so that
   * no dlclose can unmap the object under the reader (seen when the
   * reading came after dl_iterate_phdr returned: SIGSEGV in classify,
   * test_hardening's dlopen/dlclose loop), and classified from the copy
   * once the lock is let go (build_table). Holding each object with
   * dlopen(RTLD_NOLOAD) instead ran the initialisers again of objects that
   * exit had begun to finalise: a deadlock at exit, once the table was
   * built on the profiler's thread after start. */
  b->ex_at[b->n] = b->nex;
  if (o.hdr && !copy_tables(b, &o))
    o.hdr = NULL;
  b->objs[b->n++] = o;
  if (!o.hdr)
    return 0;
  if (b->one_pass) {
    classify_object(b, &b->objs[b->n - 1]);
    return 0;
  }
  b->copied = 1;
  return 1; /* ends the pass */
}

static int compare_lo(const void *a, const void *b) {
  uintptr_t x = ((const fp_object *)a)->lo, y = ((const fp_object *)b)->lo;
  return (x > y) - (x < y);
}

static int counters_of(struct dl_phdr_info *info, size_t size, void *arg) {
  unsigned long long *c = arg;
  if (size >=
      offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    c[0] = info->dlpi_adds;
    c[1] = info->dlpi_subs;
  }
  return 1;
}

/* A build whose objects came or went between its passes starts again, at
 * most this many times; then it makes one pass. */
#define BUILD_RESTARTS 3

/* Builds a table from the objects loaded now. NULL if memory is short.
 * One object per pass of dl_iterate_phdr: its tables are copied under the
 * loader's lock (libc's 0.2 MB) and classified after the pass, so that the
 * lock is held for a copy, not for every function of every object (7 ms
 * of CPU for the 15 objects of a program with jemalloc and libstdc++, more
 * when the thread is preempted): meanwhile every dlopen, and every unwind
 * libunwind makes, waits, among them those of samples, each holding a slot
 * of the ring that the drain thread cannot pass (docs/signals.md). */
static fp_table *build_table(void) {
  size_t tmp_bytes = MAX_OBJECTS * (sizeof(fp_object) + sizeof(size_t));
  void *tmp = mmap(NULL, tmp_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (tmp == MAP_FAILED)
    return NULL;
  size_t ex_bytes = 64 * 1024;
  void *ex = mmap(NULL, ex_bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ex == MAP_FAILED) {
    munmap(tmp, tmp_bytes);
    return NULL;
  }
  unsigned long closes = atomic_load(&dl_closes);
  build_ctx b = {.objs = tmp,
                 .cap = MAX_OBJECTS,
                 .ex = ex,
                 .ex_bytes = ex_bytes,
                 .ex_at = (size_t *)((fp_object *)tmp + MAX_OBJECTS)};
  for (int restarts = 0;;) {
    b.seen = 0;
    b.changed = b.copied = 0;
    int more = dl_iterate_phdr(collect_object, &b);
    if (b.changed) {
      b.n = b.nex = b.next = 0;
      b.one_pass = ++restarts == BUILD_RESTARTS;
      continue;
    }
    if (b.copied)
      classify_object(&b, &b.objs[b.n - 1]);
    if (!more)
      break;
  }
  if (b.copy)
    munmap(b.copy, b.copy_bytes);
  size_t nfp = 0;
  for (size_t i = 0; i < b.n; i++)
    nfp += (size_t)(b.objs[i].hdr && b.objs[i].fp);
  size_t bytes =
      sizeof(fp_table) + b.n * sizeof(fp_object) + b.nex * sizeof(uint32_t);
  fp_table *t = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (t == MAP_FAILED) {
    munmap(b.ex, b.ex_bytes);
    munmap(tmp, tmp_bytes);
    return NULL;
  }
  t->bytes = bytes;
  t->adds = b.adds;
  t->subs = b.subs;
  t->closes = closes;
  t->n = b.n;
  t->nfp = nfp;
  uint32_t *tex = (uint32_t *)&t->obj[b.n];
  memcpy(tex, b.ex, b.nex * sizeof(uint32_t));
  for (size_t i = 0; i < b.n; i++)
    b.objs[i].except = tex + b.ex_at[i];
  qsort(b.objs, b.n, sizeof *b.objs, compare_lo);
  memcpy(t->obj, b.objs, b.n * sizeof *b.objs);
  munmap(b.ex, b.ex_bytes);
  munmap(tmp, tmp_bytes);
  return t;
}

/* ---- the rule cache ---------------------------------------------------- */

/* Direct-mapped, shared by all threads, written by handlers without locks:
 * an entry is two words, (key ^ val, val); a reader takes it only if they
 * agree with its pc, so torn or racing writes read as misses. val packs a
 * rule with the table generation it was read under. */
#define RULE_CACHE 4096
typedef struct rule_entry {
  _Atomic uint64_t x, v;
} rule_entry;
static rule_entry rule_cache[RULE_CACHE];

/* val: bit 63 valid; 62 cfa from rbp; 61-60 rbp_how; 59 ra undefined;
 * 58-48 gen; 47-32 cfa_off; 31-16 rbp_off (signed); 15 an rbp frame
 * (the caller's frame pointer was checked: fp_step); 14-0 unused. */
#define RULE_FP_FRAME (1ull << 15)
static uint64_t pack_rule(const cfa_rule *c, unsigned gen) {
  return (1ull << 63) | ((uint64_t)(c->cfa_reg == DW_RBP) << 62) |
         ((uint64_t)(c->rbp_how & 3) << 60) |
         ((uint64_t)(c->ra_how == 0) << 59) | ((uint64_t)(gen & 0x7ff) << 48) |
         ((uint64_t)(uint16_t)c->cfa_off << 32) |
         ((uint64_t)(uint16_t)(int16_t)c->rbp_off << 16);
}

static void unpack_rule(uint64_t v, cfa_rule *c) {
  memset(c, 0, sizeof *c);
  c->cfa_reg = (v >> 62) & 1 ? DW_RBP : DW_RSP;
  c->rbp_how = (uint8_t)((v >> 60) & 3);
  c->ra_how = (v >> 59) & 1 ? 0 : 1;
  c->ra_off = -8;
  c->cfa_off = (int32_t)(uint16_t)(v >> 32);
  c->rbp_off = (int16_t)(uint16_t)(v >> 16);
}

/* Whether a rule fits the cache and the walker: CFA from rsp or rbp, the
 * return address at CFA - 8 or undefined, rbp untouched or saved. */
static int rule_walkable(const cfa_rule *c) {
  return !c->cfa_expr && (c->cfa_reg == DW_RSP || c->cfa_reg == DW_RBP) &&
         c->cfa_off >= 0 && c->cfa_off < 0x8000 && c->rbp_how < 2 &&
         (c->ra_how == 0 || (c->ra_how == 1 && c->ra_off == -8)) &&
         c->rbp_off > -0x8000 && c->rbp_off < 0x8000;
}

/* ---- lookups (async-signal-safe) --------------------------------------- */

static const fp_object *object_of(const fp_table *t, uintptr_t pc) {
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->obj[mid].lo <= pc)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0)
    return NULL;
  const fp_object *o = &t->obj[lo - 1];
  return pc < o->hi ? o : NULL;
}

/* Whether the function holding pc makes an rbp frame. */
static int function_has_fp(const fp_object *o, uintptr_t pc) {
  uint32_t off = (uint32_t)(pc - o->lo);
  size_t lo = 0, hi = o->nexcept;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (o->except[2 * mid] <= off)
      lo = mid + 1;
    else
      hi = mid;
  }
  int in = lo > 0 && off < o->except[2 * (lo - 1) + 1];
  return in ? !o->fp : o->fp;
}

/* The cached rule for pc: 1 and *v, or 0. */
static inline int cache_get(const fp_table *t, uintptr_t pc, uint64_t *v) {
  rule_entry *e = &rule_cache[(pc ^ (pc >> 12)) % RULE_CACHE];
  uint64_t x = atomic_load_explicit(&e->x, memory_order_relaxed);
  uint64_t w = atomic_load_explicit(&e->v, memory_order_relaxed);
  if ((x ^ w) != pc || !(w >> 63) || ((w >> 48) & 0x7ff) != (t->gen & 0x7ff))
    return 0;
  *v = w;
  return 1;
}

static void cache_put(uintptr_t pc, uint64_t v) {
  rule_entry *e = &rule_cache[(pc ^ (pc >> 12)) % RULE_CACHE];
  atomic_store_explicit(&e->x, 0, memory_order_relaxed);
  atomic_store_explicit(&e->v, v, memory_order_relaxed);
  atomic_store_explicit(&e->x, pc ^ v, memory_order_relaxed);
}

/* The rule at pc from the object's .eh_frame. Returns 0, -1 if there is
 * none the walker can follow. */
static int rule_from_cfi(const fp_object *o, uintptr_t pc, cfa_rule *out) {
  if (!o->hdr)
    return -1;
  /* The last index entry at or below pc. */
  size_t lo = 0, hi = o->nindex;
  uintptr_t base = (uintptr_t)o->hdr;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (base + (uintptr_t)(intptr_t)o->index[2 * mid] <= pc)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0)
    return -1;
  const uint8_t *fde = o->hdr + o->index[2 * (lo - 1) + 1];
  if (fde < o->eh_lo || fde >= o->eh_hi)
    return -1;
  cfa_state st;
  uintptr_t start, len;
  if (fde_rule(fde, o->eh_lo, o->eh_hi, 0, pc, &st, &start, &len) != 0 ||
      !rule_walkable(&st.cur))
    return -1;
  *out = st.cur;
  return 0;
}

/* ---- the walk (async-signal-safe) -------------------------------------- */

typedef struct bounds {
  uintptr_t lo, hi;
} bounds;

/* The 8-byte word at a, if a is aligned and inside [lo, hi). Reads other
 * frames' slots, as libunwind's (uninstrumented) loads did: not
 * instrumented by AddressSanitizer. */
__attribute__((no_sanitize("address"))) static inline int
load(const bounds *b, uintptr_t a, uintptr_t *v) {
  if (a < b->lo || a > b->hi - 8 || (a & 7))
    return -1;
  *v = *(const uintptr_t *)a;
  return 0;
}

/* The caller's registers from a rule: 1 stepped, 0 outermost frame, -1
 * out of bounds. *ra_at: where the return address was read. */
static int rule_step(const cfa_rule *c, const bounds *b, uintptr_t *pc,
                     uintptr_t *sp, uintptr_t *bp, uintptr_t *ra_at) {
  if (c->ra_how == 0)
    return 0;
  uintptr_t cfa = (c->cfa_reg == DW_RBP ? *bp : *sp) + (uintptr_t)c->cfa_off;
  if (cfa <= *sp || cfa > b->hi)
    return -1;
  uintptr_t ra, nbp = *bp;
  if (load(b, cfa - 8, &ra) != 0)
    return -1;
  if (c->rbp_how == 1 && load(b, cfa + (uintptr_t)(intptr_t)c->rbp_off, &nbp))
    return -1;
  *pc = ra;
  *sp = cfa;
  *bp = nbp;
  *ra_at = cfa - 8;
  return 1;
}

/* One rbp step: 1, or -1 when the frame pointer is not a frame in bounds. */
static int fp_step(const bounds *b, uintptr_t *pc, uintptr_t *sp, uintptr_t *bp,
                   uintptr_t *ra_at) {
  uintptr_t fp = *bp, ra, nbp;
  if (fp < *sp || (fp & 15) || load(b, fp, &nbp) || load(b, fp + 8, &ra))
    return -1;
  *pc = ra;
  *sp = fp + 16;
  *bp = nbp;
  *ra_at = fp + 8;
  return 1;
}

static CP_TLS int walking; /* a nested walk on this thread (see cp_fpwalk) */

/* slots (may be NULL): where each frame's pc was read, 0 for the first. */
static size_t walk(const fp_table *t, const cp_fp_regs *r, const bounds *b,
                   cp_unwind_mode mode, int exact, uint64_t *frames,
                   uint64_t *slots, size_t max_frames, int *truncated) {
  uintptr_t pc = r->pc, sp = r->sp, bp = r->bp, ra_at = 0;
  size_t n = 0;
  for (;;) {
    if (pc == 0)
      return n;
    if (n == max_frames) {
      *truncated = 1;
      return n;
    }
    if (slots)
      slots[n] = ra_at;
    frames[n++] = pc;
    int step;
    if (mode == CP_UNWIND_FP) {
      step = fp_step(b, &pc, &sp, &bp, &ra_at);
      if (step < 0 || pc < 4096)
        return n; /* the chain ends or leaves the stack: the stack ends */
      continue;
    }
    uintptr_t at = exact ? pc : pc - 1; /* the call, for a return address */
    uint64_t v;
    if (!cache_get(t, at, &v)) {
      const fp_object *o = object_of(t, at);
      if (!o)
        return 0;
      cfa_rule c;
      if (!exact && function_has_fp(o, at)) {
        /* After the prologue of a function that makes an rbp frame (a call
         * is): CFA = rbp + 16, rbp saved at CFA - 16. */
        memset(&c, 0, sizeof c);
        c.cfa_reg = DW_RBP;
        c.cfa_off = 16;
        c.rbp_how = 1;
        c.rbp_off = -16;
        c.ra_how = 1;
        c.ra_off = -8;
        v = pack_rule(&c, t->gen) | RULE_FP_FRAME;
      } else if (rule_from_cfi(o, at, &c) == 0) {
        v = pack_rule(&c, t->gen);
      } else {
        return 0;
      }
      cache_put(at, v);
    }
    if (v & RULE_FP_FRAME) {
      step = fp_step(b, &pc, &sp, &bp, &ra_at);
    } else {
      cfa_rule c;
      unpack_rule(v, &c);
      step = rule_step(&c, b, &pc, &sp, &bp, &ra_at);
      if (step == 0)
        return n; /* the outermost frame, as its rules say */
    }
    if (step < 0)
      return 0;
    exact = 0;
  }
}

static size_t fpwalk(const cp_fp_regs *r, uintptr_t alt_lo, uintptr_t alt_hi,
                     cp_unwind_mode mode, int first_is_exact, uint64_t *frames,
                     uint64_t *slots, size_t max_frames, int *truncated) {
  *truncated = 0;
  bounds b;
  if (alt_lo < alt_hi && r->sp >= alt_lo && r->sp < alt_hi) {
    b.lo = alt_lo;
    b.hi = alt_hi;
  } else if (stack_hi && r->sp >= stack_lo && r->sp < stack_hi) {
    b.lo = stack_lo;
    b.hi = stack_hi;
  } else {
    goto fall_back; /* a stack we do not know the bounds of */
  }
  /* Reads start at sp, less the ABI's 128-byte red zone, which a signal
   * frame leaves alone (and which is mapped: the handler runs below it):
   * at an epilogue's `ret`, after `pop %rbp`, the rules still say rbp was
   * saved at CFA - 16, 8 bytes below sp. */
  if (r->sp - b.lo > RED_ZONE)
    b.lo = r->sp - RED_ZONE;
  if (max_frames == 0)
    goto fall_back;
  if (mode == CP_UNWIND_FP) {
    return walk(NULL, r, &b, mode, first_is_exact, frames, slots, max_frames,
                truncated);
  }
  if (!dl_tracking_ok || walking)
    goto fall_back;
  walking = 1;
  atomic_long *reading = &readers[(unsigned)cp_gettid() % READER_SHARDS].n;
  atomic_fetch_add_explicit(reading, 1, memory_order_seq_cst);
  fp_table *t = atomic_load_explicit(&table, memory_order_seq_cst);
  size_t n = 0;
  /* Not after a dlclose since the table was built: its objects' .eh_frame
   * may be gone. */
  if (t && atomic_load_explicit(&dl_closes, memory_order_acquire) == t->closes)
    n = walk(t, r, &b, mode, first_is_exact, frames, slots, max_frames,
             truncated);
  atomic_fetch_sub_explicit(reading, 1, memory_order_release);
  walking = 0;
  if (n == 0) {
    *truncated = 0;
    goto fall_back;
  }
  return n;
fall_back:
  atomic_fetch_add_explicit(&n_fell_back, 1, memory_order_relaxed);
  return 0;
}

size_t cp_fpwalk(const cp_fp_regs *r, uintptr_t alt_lo, uintptr_t alt_hi,
                 cp_unwind_mode mode, int first_is_exact, uint64_t *frames,
                 size_t max_frames, int *truncated) {
  return fpwalk(r, alt_lo, alt_hi, mode, first_is_exact, frames, NULL,
                max_frames, truncated);
}

size_t cp_fpwalk_slots(const cp_fp_regs *r, uintptr_t alt_lo, uintptr_t alt_hi,
                       cp_unwind_mode mode, uint64_t *frames, uint64_t *slots,
                       size_t max_frames, int *truncated) {
  return fpwalk(r, alt_lo, alt_hi, mode, 1, frames, slots, max_frames,
                truncated);
}

/* ---- setup and refresh (not signal-safe) ------------------------------- */

/* Publishes t and retires the table it replaces: unmapped once no walk
 * reads it (walks take microseconds; past a second of waiting it is left
 * mapped, a few KiB, rather than risk a fault). Caller holds build_lock. */
static void publish(fp_table *t) {
  t->gen = ++table_gen;
  fp_table *old = atomic_exchange(&table, t);
  if (!old)
    return;
  /* A walk that counted itself after its count was seen at 0 loads the
   * new table (the exchange came before that load, in the one order of
   * sequentially consistent operations). */
  int shard = 0;
  for (int i = 0; i < 1000; i++) {
    while (shard < READER_SHARDS && atomic_load(&readers[shard].n) == 0)
      shard++;
    if (shard == READER_SHARDS) {
      munmap(old, old->bytes);
      return;
    }
    usleep(1000);
  }
}

void cp_fpwalk_main_thread_start(void) {
  if (!stack_hi && cp_gettid() == getpid())
    main_thread_stack();
}

/* Set by cp_fpwalk_init_later: the next refresh builds the table. */
static atomic_int table_wanted;

void cp_fpwalk_init(void) {
  if (atomic_load(&table))
    return; /* built at an earlier start (and kept across fork) */
  pthread_mutex_lock(&build_lock);
  dl_tracking_ok = cp_interpose_sees_dlclose();
  if (!atomic_load(&table)) {
    fp_table *t = build_table();
    if (t)
      publish(t);
    cp_fpwalk_stats st;
    cp_fpwalk_stats_get(&st);
    cp_debug("unwinder: %zu objects, %zu built with frame pointers; "
             "dlclose %s",
             st.objects, st.fp_objects,
             dl_tracking_ok ? "counted" : "not seen (auto uses libunwind)");
  }
  pthread_mutex_unlock(&build_lock);
}

void cp_fpwalk_after_fork_child(void) {
  /* The parent's other threads are gone: their walks and a rebuild in
   * progress with them. */
  pthread_mutex_init(&build_lock, NULL);
  for (int i = 0; i < READER_SHARDS; i++)
    atomic_store(&readers[i].n, 0);
}

void cp_fpwalk_init_later(void) { atomic_store(&table_wanted, 1); }

int cp_fpwalk_refresh_due(void) {
  fp_table *cur = atomic_load(&table);
  if (!cur)
    return atomic_load(&table_wanted);
  unsigned long long c[2] = {0, 0};
  dl_iterate_phdr(counters_of, c);
  return c[0] != cur->adds || c[1] != cur->subs ||
         atomic_load(&dl_closes) != cur->closes;
}

void cp_fpwalk_refresh(void) {
  if (!cp_fpwalk_refresh_due())
    return;
  if (!atomic_load(&table)) {
    cp_fpwalk_init();
    return;
  }
  pthread_mutex_lock(&build_lock);
  fp_table *t = build_table();
  if (t)
    publish(t);
  pthread_mutex_unlock(&build_lock);
}

int cp_fpwalk_table_pending(void) {
  return atomic_load_explicit(&table_wanted, memory_order_relaxed) &&
         !atomic_load_explicit(&table, memory_order_relaxed);
}

void cp_fpwalk_stats_get(cp_fpwalk_stats *out) {
  memset(out, 0, sizeof *out);
  out->fell_back = atomic_load(&n_fell_back);
  fp_table *t = atomic_load(&table);
  if (t) {
    out->objects = t->n;
    out->fp_objects = t->nfp;
  }
}

int cp_fpwalk_object_has_fp(uintptr_t addr) {
  fp_table *t = atomic_load(&table);
  if (!t)
    return -1;
  const fp_object *o = object_of(t, addr);
  return o && o->hdr ? o->fp : -1;
}

int cp_fpwalk_function_has_fp(uintptr_t addr) {
  fp_table *t = atomic_load(&table);
  if (!t)
    return -1;
  const fp_object *o = object_of(t, addr);
  return o && o->hdr ? function_has_fp(o, addr) : -1;
}
