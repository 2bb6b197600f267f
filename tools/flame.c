/* `contprof folded`, `flame` and `diff`: the merged profile as a call tree
 * (frames by function name, root first, children in name order), written
 * as collapsed stacks, as a self-contained HTML flame graph (the page is
 * tools/flame.html, compiled in), as a static SVG, or as a differential
 * flame graph of two profiles. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "flame_html.h"
#include "profmerge.h"

/* ---- the call tree ------------------------------------------------------- */

typedef struct tnode {
  uint32_t name, parent, child, next; /* child/next: 0 = none (0 is root) */
} tnode;

typedef struct tree {
  tnode *nodes;
  int64_t *values; /* nslots per node */
  size_t n, cap, nslots, slot;
  uint32_t *ix; /* (parent, name) -> node + 1 */
  size_t ixcap;
  char **names; /* interned frame names */
  size_t nnames, namescap;
  uint32_t *nix; /* name -> index + 1 */
  size_t nixcap;
  size_t bytes, max_bytes;
} tree;

static uint64_t hstr(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h ^ (h >> 31);
}

static uint64_t hpair(uint32_t a, uint32_t b) {
  uint64_t h = ((uint64_t)a << 32 | b) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

static uint32_t *grow_ix(tree *t, uint32_t *ix, size_t *cap, size_t count,
                         uint64_t (*rehash)(tree *, uint32_t)) {
  if ((count + 1) * 2 <= *cap)
    return ix;
  size_t ncap = *cap ? *cap * 2 : 4096;
  uint32_t *n = calloc(ncap, sizeof *n);
  if (!n)
    return NULL;
  for (size_t i = 0; i < *cap; i++)
    if (ix[i]) {
      size_t j = rehash(t, ix[i] - 1) & (ncap - 1);
      while (n[j])
        j = (j + 1) & (ncap - 1);
      n[j] = ix[i];
    }
  t->bytes += (ncap - *cap) * sizeof *n;
  free(ix);
  *cap = ncap;
  return n;
}

static uint64_t name_hash(tree *t, uint32_t i) { return hstr(t->names[i]); }
static uint64_t node_hash(tree *t, uint32_t i) {
  return hpair(t->nodes[i].parent, t->nodes[i].name);
}

static int64_t tree_name(tree *t, const char *s) {
  uint32_t *ix = grow_ix(t, t->nix, &t->nixcap, t->nnames, name_hash);
  if (!ix)
    return -1;
  t->nix = ix;
  size_t j = hstr(s) & (t->nixcap - 1);
  for (; ix[j]; j = (j + 1) & (t->nixcap - 1))
    if (strcmp(t->names[ix[j] - 1], s) == 0)
      return ix[j] - 1;
  if (t->nnames == t->namescap) {
    size_t c = t->namescap ? t->namescap * 2 : 1024;
    char **nn = realloc(t->names, c * sizeof *nn);
    if (!nn)
      return -1;
    t->bytes += (c - t->namescap) * sizeof *nn;
    t->names = nn;
    t->namescap = c;
  }
  if (!(t->names[t->nnames] = strdup(s)))
    return -1;
  t->bytes += strlen(s) + 1;
  ix[j] = (uint32_t)++t->nnames;
  return (int64_t)t->nnames - 1;
}

static int tree_init(tree *t, size_t nslots, size_t max_bytes) {
  memset(t, 0, sizeof *t);
  t->nslots = nslots;
  t->max_bytes = max_bytes;
  t->cap = 1024;
  t->nodes = calloc(t->cap, sizeof *t->nodes);
  t->values = calloc(t->cap * nslots, sizeof *t->values);
  if (!t->nodes || !t->values || tree_name(t, "all") != 0)
    return -1;
  t->n = 1; /* the root, "all" */
  return 0;
}

static void tree_free(tree *t) {
  for (size_t i = 0; i < t->nnames; i++)
    free(t->names[i]);
  free(t->names);
  free(t->nix);
  free(t->ix);
  free(t->nodes);
  free(t->values);
}

static int64_t tree_child(tree *t, uint32_t parent, uint32_t name) {
  uint32_t *ix = grow_ix(t, t->ix, &t->ixcap, t->n, node_hash);
  if (!ix)
    return -1;
  t->ix = ix;
  size_t j = hpair(parent, name) & (t->ixcap - 1);
  for (; ix[j]; j = (j + 1) & (t->ixcap - 1)) {
    const tnode *c = &t->nodes[ix[j] - 1];
    if (c->parent == parent && c->name == name)
      return ix[j] - 1;
  }
  if (t->n == t->cap) {
    size_t c = t->cap * 2;
    tnode *nn = realloc(t->nodes, c * sizeof *nn);
    if (!nn)
      return -1;
    t->nodes = nn;
    int64_t *nv = realloc(t->values, c * t->nslots * sizeof *nv);
    if (!nv)
      return -1;
    t->values = nv;
    memset(nv + t->cap * t->nslots, 0, t->cap * t->nslots * sizeof *nv);
    t->bytes += t->cap * (sizeof *nn + t->nslots * sizeof *nv);
    t->cap = c;
  }
  if (t->n >= UINT32_MAX - 1)
    return -1;
  t->nodes[t->n] = (tnode){name, parent, 0, 0};
  ix[j] = (uint32_t)++t->n;
  return (int64_t)t->n - 1;
}

typedef struct add_ctx {
  tree *t;
  int types[64]; /* merged type index per slot, or -1 */
  size_t first_slot;
} add_ctx;

static int64_t sat(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}

static int add_stack(void *arg, const char *const *frames, size_t nframes,
                     const int64_t *values) {
  add_ctx *c = arg;
  tree *t = c->t;
  uint32_t at = 0;
  for (size_t f = 0;; f++) {
    int64_t *v = &t->values[(size_t)at * t->nslots];
    for (size_t s = 0; s < t->nslots; s++)
      if (c->types[s] >= 0)
        v[s] = sat(v[s], values[c->types[s]]);
    if (f == nframes)
      break;
    int64_t name = tree_name(t, frames[f]);
    int64_t child = name < 0 ? -1 : tree_child(t, at, (uint32_t)name);
    if (child < 0)
      return -1;
    at = (uint32_t)child;
  }
  return t->bytes > t->max_bytes ? -1 : 0;
}

/* Links children in name order (after all stacks are in). */
static tree *sort_tree;
static int child_cmp(const void *a, const void *b) {
  const uint32_t *x = a, *y = b;
  return strcmp(sort_tree->names[sort_tree->nodes[*x].name],
                sort_tree->names[sort_tree->nodes[*y].name]);
}

static int tree_link(tree *t) {
  uint32_t *order = malloc((t->n ? t->n : 1) * sizeof *order);
  if (!order)
    return -1;
  for (size_t i = 0; i < t->n; i++)
    order[i] = (uint32_t)i;
  sort_tree = t;
  qsort(order + 1, t->n - 1, sizeof *order, child_cmp);
  for (size_t i = 0; i < t->n; i++)
    t->nodes[i].child = t->nodes[i].next = 0;
  /* Backwards, so each prepend leaves the children in ascending order. */
  for (size_t k = t->n; k-- > 1;) {
    uint32_t i = order[k];
    tnode *p = &t->nodes[t->nodes[i].parent];
    t->nodes[i].next = p->child;
    p->child = i;
  }
  free(order);
  return 0;
}

/* Preorder walk with a depth, without recursion (stacks can be deep). */
typedef int (*visit_fn)(void *arg, const tree *t, uint32_t node, size_t depth,
                        const uint32_t *path);
static int tree_walk(const tree *t, visit_fn fn, void *arg) {
  size_t cap = 256, depth = 0;
  uint32_t *path = malloc(cap * sizeof *path);
  if (!path)
    return -1;
  path[0] = 0;
  int rc = fn(arg, t, 0, 0, path);
  uint32_t cur = t->nodes[0].child;
  while (rc == 0 && cur) {
    depth++;
    if (depth >= cap) {
      uint32_t *np = realloc(path, (cap *= 2) * sizeof *np);
      if (!np) {
        rc = -1;
        break;
      }
      path = np;
    }
    path[depth] = cur;
    if ((rc = fn(arg, t, cur, depth, path)) != 0)
      break;
    if (t->nodes[cur].child) {
      cur = t->nodes[cur].child;
      continue;
    }
    while (cur && !t->nodes[cur].next) { /* up until a sibling */
      cur = t->nodes[cur].parent;
      depth--;
    }
    if (cur) {
      cur = t->nodes[cur].next;
      depth--;
    }
  }
  free(path);
  return rc;
}

/* ---- common options and input ------------------------------------------- */

typedef struct view_args {
  const char *out, *type;
  char **paths;
  size_t npaths;
  size_t max_memory;
  bool svg;
} view_args;

static int parse_view_args(const char *verb, int argc, char **argv,
                           view_args *va, void (*usage)(FILE *)) {
  memset(va, 0, sizeof *va);
  va->max_memory = PPROF_READ_MAX_MEMORY;
  va->paths = calloc(argc > 0 ? (size_t)argc : 1, sizeof *va->paths);
  if (!va->paths)
    return 1;
  int done = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    int missing = 0;
    if (done || a[0] != '-' || strcmp(a, "-") == 0) {
      va->paths[va->npaths++] = argv[i];
    } else if (strcmp(a, "--") == 0) {
      done = 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return -1;
    } else if (strcmp(a, "--svg") == 0) {
      if (strcmp(verb, "flame") != 0) {
        fprintf(stderr, "contprof: %s: --svg is for contprof flame\n", verb);
        usage(stderr);
        return 2;
      }
      va->svg = true;
    } else if ((v = cp_option(argc, argv, &i, "-o", &missing)) ||
               (v = cp_option(argc, argv, &i, "--output", &missing))) {
      va->out = v;
    } else if ((v = cp_option(argc, argv, &i, "--type", &missing))) {
      va->type = v;
    } else if ((v = cp_option(argc, argv, &i, "--max-memory", &missing))) {
      if (cp_parse_mib(v, &va->max_memory) != 0) {
        fprintf(stderr, "contprof: %s: --max-memory needs a size in MiB\n",
                verb);
        return 2;
      }
    } else {
      fprintf(stderr, "contprof: %s: %s %s\n", verb,
              missing ? "a value is missing after" : "unknown option", a);
      usage(stderr);
      return 2;
    }
  }
  if (va->npaths == 0) {
    usage(stderr);
    return 2;
  }
  return 0;
}

/* Merges paths (labels dropped: the views show stacks). */
static cp_merge *merge_paths(const char *verb, char **paths, size_t n,
                             const char *type, size_t max_memory) {
  cp_merge_options o = {
      .type = type, .drop_all_labels = 1, .max_memory = max_memory};
  cp_merge *m = cp_merge_create(&o);
  char err[1024];
  if (!m) {
    fprintf(stderr, "contprof: %s: out of memory\n", verb);
    return NULL;
  }
  if (cp_merge_add_paths(m, paths, n, err, sizeof err) != 0) {
    cp_report(verb, err);
    cp_merge_destroy(m);
    return NULL;
  }
  return m;
}

/* ---- output buffer ------------------------------------------------------- */

/* The page or SVG is built in memory, within --max-memory like the rest. */
typedef struct buf {
  char *p;
  size_t n, cap, limit; /* limit: 0 for none */
  bool failed, too_big;
} buf;

static void put(buf *b, const char *s, size_t n) {
  if (b->failed)
    return;
  if (b->n + n + 1 > b->cap) {
    size_t c = b->cap ? b->cap : 65536;
    while (c < b->n + n + 1)
      c *= 2;
    if (b->limit && c > b->limit) {
      b->failed = b->too_big = true;
      return;
    }
    char *np = realloc(b->p, c);
    if (!np) {
      b->failed = true;
      return;
    }
    b->p = np;
    b->cap = c;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}
static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }
static void putf(buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void putf(buf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0)
    put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Next code point of s (valid UTF-8), or U+FFFD for one invalid byte. */
static uint32_t next_cp(const unsigned char **s) {
  uint32_t cp;
  size_t n = pprof_utf8_length(*s, &cp);
  *s += n ? n : 1;
  return n ? cp : 0xfffd;
}

static void put_cp(buf *b, uint32_t c) {
  char u[4];
  size_t n;
  if (c < 0x80)
    u[0] = (char)c, n = 1;
  else if (c < 0x800)
    u[0] = (char)(0xc0 | c >> 6), u[1] = (char)(0x80 | (c & 0x3f)), n = 2;
  else if (c < 0x10000)
    u[0] = (char)(0xe0 | c >> 12), u[1] = (char)(0x80 | ((c >> 6) & 0x3f)),
    u[2] = (char)(0x80 | (c & 0x3f)), n = 3;
  else
    u[0] = (char)(0xf0 | c >> 18), u[1] = (char)(0x80 | ((c >> 12) & 0x3f)),
    u[2] = (char)(0x80 | ((c >> 6) & 0x3f)), u[3] = (char)(0x80 | (c & 0x3f)),
    n = 4;
  put(b, u, n);
}

/* A JSON string safe inside a <script> element: besides what JSON needs,
 * < > & become \u003c \u003e \u0026 (so "</script>" and "<!--" cannot
 * appear), and U+2028/U+2029 are escaped; invalid UTF-8 becomes U+FFFD. */
static void put_json_str(buf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  puts_(b, "\"");
  while (*p) {
    uint32_t c = next_cp(&p);
    if (c == '"')
      puts_(b, "\\\"");
    else if (c == '\\')
      puts_(b, "\\\\");
    else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f ||
             c == 0x2028 || c == 0x2029)
      putf(b, "\\u%04x", (unsigned)c);
    else
      put_cp(b, c);
  }
  puts_(b, "\"");
}

/* Text for XML (SVG): & < > " ' as entities, controls as U+FFFD. */
static void put_xml(buf *b, const char *s, size_t max_chars) {
  const unsigned char *p = (const unsigned char *)s;
  for (size_t k = 0; *p && k < max_chars; k++) {
    uint32_t c = next_cp(&p);
    if (c == '&')
      puts_(b, "&amp;");
    else if (c == '<')
      puts_(b, "&lt;");
    else if (c == '>')
      puts_(b, "&gt;");
    else if (c == '"')
      puts_(b, "&quot;");
    else if (c == '\'')
      puts_(b, "&#39;");
    else if (c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0xfffe || c == 0xffff)
      put_cp(b, 0xfffd);
    else
      put_cp(b, c);
  }
}

static int finish(const char *verb, buf *b, const char *out) {
  char err[1024];
  if (b->failed) {
    if (b->too_big)
      fprintf(stderr,
              "contprof: %s: the output is over the %zu MiB of "
              "--max-memory\n",
              verb, b->limit >> 20);
    else
      fprintf(stderr, "contprof: %s: out of memory\n", verb);
    free(b->p);
    return 1;
  }
  int rc = cp_write_output(out, b->p, b->n, err, sizeof err);
  free(b->p);
  if (rc != 0) {
    cp_report(verb, err);
    return 1;
  }
  return 0;
}

/* ---- folded -------------------------------------------------------------- */

static void folded_usage(FILE *out) {
  fprintf(out, "usage: contprof folded [--type TYPE] [-o|--output OUT] "
               "[--max-memory MIB] FILE|DIR...\n"
               "Prints collapsed stacks (root;...;leaf VALUE) of the merged\n"
               "FILEs, for flamegraph.pl, speedscope and other tools. In\n"
               "names, ';' and control characters are replaced by '?'.\n");
}

/* A name for a folded line: ';' (the separator) and controls (newline
 * would end the line) become '?'. */
static void put_folded_name(buf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    const unsigned char *start = p;
    uint32_t c = next_cp(&p);
    if (c == ';' || c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f))
      puts_(b, "?");
    else if (c == 0xfffd && p == start + 1)
      puts_(b, "?");
    else
      put(b, (const char *)start, (size_t)(p - start));
  }
}

static int64_t self_value(const tree *t, uint32_t node) {
  int64_t v = t->values[(size_t)node * t->nslots + t->slot];
  for (uint32_t c = t->nodes[node].child; c; c = t->nodes[c].next)
    v -= t->values[(size_t)c * t->nslots + t->slot];
  return v;
}

static int folded_visit(void *arg, const tree *t, uint32_t node, size_t depth,
                        const uint32_t *path) {
  buf *b = arg;
  if (depth == 0)
    return 0;
  int64_t self = self_value(t, node);
  if (self == 0)
    return 0;
  for (size_t d = 1; d <= depth; d++) {
    if (d > 1)
      puts_(b, ";");
    put_folded_name(b, t->names[t->nodes[path[d]].name]);
  }
  putf(b, " %" PRId64 "\n", self);
  return b->failed ? -1 : 0;
}

/* Builds the tree of m with the given merged types as slots. */
static int build_tree(const char *verb, tree *t, cp_merge *m, const int *types,
                      size_t nslots, size_t max_memory) {
  if (tree_init(t, nslots, max_memory) != 0) {
    fprintf(stderr, "contprof: %s: out of memory\n", verb);
    return -1;
  }
  add_ctx c = {.t = t};
  for (size_t s = 0; s < nslots; s++)
    c.types[s] = types[s];
  if (cp_merge_each_stack(m, add_stack, &c) != 0 || tree_link(t) != 0) {
    fprintf(stderr,
            "contprof: %s: out of memory (the call tree is over "
            "the %zu MiB limit)\n",
            verb, max_memory >> 20);
    return -1;
  }
  return 0;
}

static int pick_type(const char *verb, cp_merge *m, const char *type) {
  int ti = type ? cp_merge_type_index(m, type) : cp_merge_default_type(m);
  if (ti < 0)
    fprintf(stderr, "contprof: %s: no sample type %s\n", verb,
            type ? type : "");
  return ti;
}

int cp_cmd_folded(int argc, char **argv) {
  view_args va;
  int rc = parse_view_args("folded", argc, argv, &va, folded_usage);
  if (rc)
    goto out;
  rc = 1;
  cp_merge *m =
      merge_paths("folded", va.paths, va.npaths, va.type, va.max_memory);
  if (!m)
    goto out;
  int ti = pick_type("folded", m, va.type);
  tree t;
  if (ti >= 0 && build_tree("folded", &t, m, &ti, 1, va.max_memory) == 0) {
    buf b = {.limit = va.max_memory};
    tree_walk(&t, folded_visit, &b);
    rc = finish("folded", &b, va.out ? va.out : "-");
  }
  if (ti >= 0)
    tree_free(&t);
  cp_merge_destroy(m);
out:
  free(va.paths);
  return rc < 0 ? 0 : rc;
}

/* ---- flame (HTML, SVG) and diff ----------------------------------------- */

typedef struct json_ctx {
  buf *b;
  bool first;
} json_ctx;

static int json_visit(void *arg, const tree *t, uint32_t node, size_t depth,
                      const uint32_t *path) {
  (void)path;
  json_ctx *c = arg;
  const int64_t *v = &t->values[(size_t)node * t->nslots];
  putf(c->b, "%s%u,%zu", c->first ? "" : ",", t->nodes[node].name, depth);
  c->first = false;
  for (size_t s = 0; s < t->nslots; s++)
    putf(c->b, ",%" PRId64, v[s]);
  if ((node & 1023) == 0)
    put(c->b, "\n", 1);
  return c->b->failed ? -1 : 0;
}

/* The page: the template with @DATA@ replaced by the tree's JSON. */
static void put_page(buf *b, const tree *t, cp_merge *const *ms, size_t nms,
                     const int *types, size_t initial, const char *title,
                     bool diff) {
  const char *tpl = cp_flame_html, *at = strstr(tpl, "@DATA@");
  put(b, tpl, (size_t)(at - tpl));
  puts_(b, "{\"title\":");
  put_json_str(b, title);
  putf(b, ",\"diff\":%s,\"slots\":%zu,\"initial\":%zu,\"types\":[",
       diff ? "true" : "false", t->nslots, initial);
  size_t ntypes = diff ? 1 : t->nslots;
  for (size_t s = 0; s < ntypes; s++) {
    puts_(b, s ? ",{\"name\":" : "{\"name\":");
    put_json_str(b, cp_merge_type(ms[nms - 1], (size_t)types[s]));
    puts_(b, ",\"unit\":");
    put_json_str(b, cp_merge_unit(ms[nms - 1], (size_t)types[s]));
    puts_(b, "}");
  }
  puts_(b, "],\"names\":[");
  for (size_t i = 0; i < t->nnames; i++) {
    if (i)
      puts_(b, i % 64 ? "," : ",\n");
    put_json_str(b, t->names[i]);
  }
  puts_(b, "],\"nodes\":[");
  json_ctx c = {b, true};
  tree_walk(t, json_visit, &c);
  puts_(b, "]}");
  puts_(b, at + 6);
}

/* The static SVG: one rect per frame wider than a tenth of a pixel, with
 * a <title> tooltip; root at the top like the HTML page. */
typedef struct svg_ctx {
  buf *b;
  double *x; /* next free x per depth */
  size_t xcap, max_depth;
  double scale;
  int64_t total;
  bool ok;
} svg_ctx;

#define SVG_WIDTH 1200.0
#define SVG_ROW 17

static int svg_visit(void *arg, const tree *t, uint32_t node, size_t depth,
                     const uint32_t *path) {
  (void)path;
  svg_ctx *c = arg;
  if (depth + 2 > c->xcap) {
    size_t nc = (depth + 2) * 2;
    double *nx = realloc(c->x, nc * sizeof *nx);
    if (!nx)
      return -1;
    c->x = nx;
    c->xcap = nc;
  }
  int64_t v = t->values[(size_t)node * t->nslots + t->slot];
  double x = depth ? c->x[depth] : 0, w = (double)v * c->scale;
  if (depth)
    c->x[depth] += w;
  c->x[depth + 1] = x;
  if (w < 0.1 || v <= 0)
    return 0;
  if (depth > c->max_depth)
    c->max_depth = depth;
  const char *name = t->names[t->nodes[node].name];
  uint64_t h = hstr(name);
  puts_(c->b, "<g><title>");
  put_xml(c->b, name, 4096);
  putf(c->b,
       " (%" PRId64 ", %.2f%%)</title><rect x=\"%.2f\" y=\"%zu\" "
       "width=\"%.2f\" height=\"%d\" fill=\"hsl(%d,%d%%,%d%%)\"/>",
       v, c->total ? 100.0 * (double)v / (double)c->total : 0, x,
       depth * SVG_ROW, w, SVG_ROW - 1, 10 + (int)(h % 40),
       60 + (int)((h >> 8) % 30), 55 + (int)((h >> 16) % 15));
  if (w > 30) {
    putf(c->b, "<text x=\"%.2f\" y=\"%zu\">", x + 3, depth * SVG_ROW + 12);
    size_t max = (size_t)((w - 6) / 6.5);
    put_xml(c->b, name, max);
    puts_(c->b, "</text>");
  }
  puts_(c->b, "</g>\n");
  return c->b->failed ? -1 : 0;
}

static void put_svg(buf *b, const tree *t, const char *title) {
  svg_ctx c = {.b = b, .total = t->values[t->slot]};
  c.scale = c.total > 0 ? SVG_WIDTH / (double)c.total : 0;
  buf body = {.limit = b->limit};
  c.b = &body;
  tree_walk(t, svg_visit, &c);
  free(c.x);
  putf(b,
       "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
       "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
       "height=\"%zu\" viewBox=\"0 0 %.0f %zu\" font-family=\"sans-serif\" "
       "font-size=\"11\">\n<title>",
       SVG_WIDTH, (c.max_depth + 1) * SVG_ROW + 4, SVG_WIDTH,
       (c.max_depth + 1) * SVG_ROW + 4);
  put_xml(b, title, 4096);
  puts_(b, "</title>\n");
  if (body.failed) {
    b->failed = true;
    b->too_big = body.too_big;
  } else if (body.p)
    put(b, body.p, body.n);
  free(body.p);
  puts_(b, "</svg>\n");
}

static void flame_usage(FILE *out) {
  fprintf(out,
          "usage: contprof flame [-o|--output OUT] [--type TYPE] [--svg]\n"
          "                      [--max-memory MIB] FILE|DIR...\n"
          "Writes a flame graph of the merged FILEs: one self-contained HTML\n"
          "page (default flame.html; click to zoom, search, a switch between\n"
          "sample types), or with --svg a static SVG (default flame.svg).\n");
}

static void title_of(char *title, size_t len, const char *what, char **paths,
                     size_t n) {
  snprintf(title, len, "%s", what);
  for (size_t i = 0; i < n && strlen(title) + 4 < len; i++) {
    const char *p = strrchr(paths[i], '/');
    p = p && p[1] ? p + 1 : paths[i];
    snprintf(title + strlen(title), len - strlen(title), "%s%s",
             i ? ", " : ": ", p);
  }
}

int cp_cmd_flame(int argc, char **argv) {
  view_args va;
  int rc = parse_view_args("flame", argc, argv, &va, flame_usage);
  if (rc)
    goto out;
  rc = 1;
  cp_merge *m = merge_paths("flame", va.paths, va.npaths, NULL, va.max_memory);
  if (!m)
    goto out;
  int ti = pick_type("flame", m, va.type);
  int types[64];
  size_t nslots = va.svg ? 1 : cp_merge_ntypes(m);
  for (size_t s = 0; s < nslots; s++)
    types[s] = va.svg ? ti : (int)s;
  tree t;
  if (ti >= 0 &&
      build_tree("flame", &t, m, types, nslots, va.max_memory) == 0) {
    buf b = {.limit = va.max_memory};
    char title[512];
    title_of(title, sizeof title, "contprof flame", va.paths, va.npaths);
    if (va.svg) {
      put_svg(&b, &t, title);
    } else {
      put_page(&b, &t, &m, 1, types, (size_t)ti, title, false);
    }
    rc = finish("flame", &b,
                va.out ? va.out : (va.svg ? "flame.svg" : "flame.html"));
  }
  if (ti >= 0)
    tree_free(&t);
  cp_merge_destroy(m);
out:
  free(va.paths);
  return rc < 0 ? 0 : rc;
}

static void diff_usage(FILE *out) {
  fprintf(
      out,
      "usage: contprof diff [-o|--output OUT] [--type TYPE] [--max-memory MIB] "
      "BASE NEW\n"
      "Writes a differential flame graph (default diff.html): frames as\n"
      "wide as in NEW, red where their share of the total grew since\n"
      "BASE, blue where it shrank; the tooltip gives both and the delta.\n"
      "BASE and NEW are pprof files or directories of them.\n");
}

int cp_cmd_diff(int argc, char **argv) {
  view_args va;
  int rc = parse_view_args("diff", argc, argv, &va, diff_usage);
  if (rc)
    goto out;
  rc = 1;
  if (va.npaths != 2) {
    fprintf(stderr,
            "contprof: diff: needs two inputs, BASE and NEW (got %zu)\n",
            va.npaths);
    diff_usage(stderr);
    rc = 2;
    goto out;
  }
  cp_merge *ms[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++)
    if (!(ms[k] = merge_paths("diff", va.paths + k, 1, NULL, va.max_memory)))
      goto done;
  int tn = pick_type("diff", ms[1], va.type);
  if (tn < 0)
    goto done;
  int tb = cp_merge_type_index(ms[0], cp_merge_type(ms[1], (size_t)tn));
  if (tb < 0 || strcmp(cp_merge_unit(ms[0], (size_t)tb),
                       cp_merge_unit(ms[1], (size_t)tn)) != 0) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s: no sample type %s/%s as in %s", va.paths[0],
             cp_merge_type(ms[1], (size_t)tn), cp_merge_unit(ms[1], (size_t)tn),
             va.paths[1]);
    cp_report("diff", msg);
    goto done;
  }
  tree t;
  if (tree_init(&t, 2, va.max_memory) != 0)
    goto done;
  add_ctx c0 = {.t = &t, .types = {tb, -1}};
  add_ctx c1 = {.t = &t, .types = {-1, tn}};
  if (cp_merge_each_stack(ms[0], add_stack, &c0) != 0 ||
      cp_merge_each_stack(ms[1], add_stack, &c1) != 0 || tree_link(&t) != 0) {
    fprintf(stderr, "contprof: diff: out of memory\n");
  } else {
    buf b = {.limit = va.max_memory};
    char title[512];
    title_of(title, sizeof title, "contprof diff", va.paths, 2);
    int types[2] = {tn, tn};
    put_page(&b, &t, ms, 2, types, 0, title, true);
    rc = finish("diff", &b, va.out ? va.out : "diff.html");
  }
  tree_free(&t);
done:
  cp_merge_destroy(ms[0]);
  cp_merge_destroy(ms[1]);
out:
  free(va.paths);
  return rc < 0 ? 0 : rc;
}
