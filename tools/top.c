/* `contprof top`: the flat/cumulative table of one or more pprof files,
 * printed the way `go tool pprof -top` does (same columns, same units). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "exporter/pprof_read.h"
#include "profmerge.h"

#define EXIT_INPUT 1
#define EXIT_USAGE 2

static void top_usage(FILE *out) {
  fprintf(out,
          "usage: contprof top FILE|DIR... [-n N] [--type TYPE] [--lines] "
          "[--max-memory MIB]\n"
          "       contprof top --list-types FILE...\n"
          "       contprof top --base BASE FILE... [-n N] [--type TYPE]\n"
          "Prints the functions with the most samples in the pprof FILEs\n"
          "(merged), like `go tool pprof -top`. Control characters in names\n"
          "are shown escaped (\\x1b).\n"
          "  -n N              show only the first N functions (default: all)\n"
          "  --type TYPE       sample type to show (default: the first "
          "file's\n"
          "                    default sample type, else its last one)\n"
          "  --lines           one row per source line (\"function "
          "file:line\",\n"
          "                    inlined frames each on their own), like "
          "-lines\n"
          "  --list-types      list the sample types of each file\n"
          "  --base BASE       compare with BASE: each function's share of\n"
          "                    the total in BASE and in FILEs, and the\n"
          "                    change in percentage points, biggest first\n"
          "  --max-memory MIB  memory for reading all FILEs (default %zu);\n"
          "                    a file past it is skipped as too large\n",
          PPROF_READ_MAX_MEMORY >> 20);
}

/* ---- units, as go tool pprof scales them --------------------------------- */

typedef struct unit_def {
  const char *name;    /* as printed */
  const char *aliases; /* space-separated, lower case, singular */
  double factor;       /* in the family's base unit */
} unit_def;

static const unit_def byte_units[] = {
    {"B", "b byte", 1},
    {"kB", "kb kbyte kilobyte", 1024.0},
    {"MB", "mb mbyte megabyte", 1024.0 * 1024},
    {"GB", "gb gbyte gigabyte", 1024.0 * 1024 * 1024},
    {"TB", "tb tbyte terabyte", 1024.0 * 1024 * 1024 * 1024},
    {"PB", "pb pbyte petabyte", 1024.0 * 1024 * 1024 * 1024 * 1024},
};
static const unit_def time_units[] = {
    {"ns", "ns nanosecond", 1},    {"us", "us microsecond", 1e3},
    {"ms", "ms millisecond", 1e6}, {"s", "s sec second", 1e9},
    {"hrs", "hour hr", 3600e9},
};

typedef struct unit_family {
  const unit_def *units;
  size_t n;
  const unit_def *fallback; /* for values below the smallest unit */
} unit_family;

static const unit_family families[] = {
    {byte_units, sizeof byte_units / sizeof byte_units[0], &byte_units[0]},
    {time_units, sizeof time_units / sizeof time_units[0], &time_units[3]},
};

static int has_alias(const char *aliases, const char *word) {
  size_t n = strlen(word);
  for (const char *a = aliases; *a;) {
    size_t len = strcspn(a, " ");
    if (len == n && strncmp(a, word, n) == 0)
      return 1;
    a += len;
    a += *a == ' ';
  }
  return 0;
}

/* The unit named by a sample type's unit string ("nanoseconds", "bytes"),
 * and its family; NULL for counts and unknown units (printed bare). */
static const unit_def *sniff_unit(const char *unit, const unit_family **fam) {
  char word[32];
  size_t n = strlen(unit);
  if (n == 0 || n >= sizeof word)
    return NULL;
  for (size_t i = 0; i <= n; i++)
    word[i] = (char)(unit[i] >= 'A' && unit[i] <= 'Z' ? unit[i] + 32 : unit[i]);
  if (n > 2 && word[n - 1] == 's')
    word[n - 1] = '\0';
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    for (size_t i = 0; i < families[f].n; i++)
      if (has_alias(families[f].units[i].aliases, word)) {
        *fam = &families[f];
        return &families[f].units[i];
      }
  return NULL;
}

/* The largest unit in which value (in from's unit) is at least 1. */
static const unit_def *auto_unit(const unit_family *fam, const unit_def *from,
                                 double value) {
  double base = fabs(value) * from->factor;
  const unit_def *best = NULL;
  for (size_t i = 0; i < fam->n; i++)
    if (base / fam->units[i].factor >= 1.0)
      best = &fam->units[i];
  return best ? best : fam->fallback;
}

typedef struct value_format {
  const unit_def *from, *to; /* NULL: print the number bare */
} value_format;

/* go tool pprof's selectOutputUnit: the unit of the smallest shown value,
 * moved up one when that would print the total with too many digits. */
static value_format choose_format(const pprof_top *top, size_t shown) {
  value_format vf = {NULL, NULL};
  const unit_family *fam = NULL;
  vf.from = sniff_unit(top->unit, &fam);
  if (!vf.from)
    return vf;
  double min = 0, max = (double)top->total;
  for (size_t i = 0; i < shown; i++) {
    double v = fabs((double)top->entries[i].flat);
    if (v == 0)
      v = fabs((double)top->entries[i].cum);
    if (v > 0 && (min == 0 || v < min))
      min = v;
  }
  if (min == 0)
    min = max;
  const unit_def *min_unit = auto_unit(fam, vf.from, min);
  const unit_def *max_unit = auto_unit(fam, vf.from, max);
  vf.to = min_unit;
  if (min_unit != max_unit && min * 100 < max)
    vf.to = auto_unit(fam, vf.from, min * 100);
  return vf;
}

/* Like go's measurement.ScaledLabel: two decimals, ".00" dropped. */
static void format_value(char *buf, size_t len, int64_t value,
                         const value_format *vf) {
  if (!vf->to) {
    snprintf(buf, len, "%" PRId64, value);
    return;
  }
  double v = (double)value * vf->from->factor / vf->to->factor;
  snprintf(buf, len, "%.2f", v);
  size_t n = strlen(buf);
  if (n > 3 && strcmp(buf + n - 3, ".00") == 0)
    buf[n - 3] = '\0';
  if (strcmp(buf, "0") == 0 || strcmp(buf, "-0") == 0)
    return;
  snprintf(buf + strlen(buf), len - strlen(buf), "%s", vf->to->name);
}

/* Like go's measurement.Percentage: always 6 characters wide. */
static void format_percent(char *buf, size_t len, int64_t value,
                           int64_t total) {
  double ratio = total ? fabs((double)value / (double)total) * 100 : 0;
  if (ratio >= 99.95 && ratio <= 100.05)
    snprintf(buf, len, "  100%%");
  else if (ratio >= 1.0)
    snprintf(buf, len, "%5.2f%%", ratio);
  else
    snprintf(buf, len, "%5.2g%%", ratio);
}

/* ---- the command --------------------------------------------------------- */

static void list_types(char **paths, pprof_profile **profiles, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const pprof_profile *p = profiles[i];
    if (!p)
      continue; /* unreadable: already reported */
    int def = pprof_default_sample_type_index(p);
    pprof_fput_escaped(paths[i], stdout);
    printf(":\n");
    for (size_t t = 0; t < p->n_sample_type; t++) {
      printf("  ");
      pprof_fput_escaped(pprof_str(p, p->sample_type[t]->type), stdout);
      printf("/");
      pprof_fput_escaped(pprof_str(p, p->sample_type[t]->unit), stdout);
      printf("%s\n", (int)t == def ? "  (default)" : "");
    }
  }
}

static void print_top(const pprof_top *top, size_t shown) {
  value_format vf = choose_format(top, shown);
  char total[64], flat[64], cum[64], flat_pc[32], sum_pc[32], cum_pc[32];
  format_value(total, sizeof total, top->total, &vf);
  printf("Type: ");
  pprof_fput_escaped(top->type, stdout);
  printf("\n");
  printf("Showing top %zu of %zu functions, total %s\n", shown, top->nentries,
         total);
  printf("%10s %5s%% %5s%% %10s %5s%%\n", "flat", "flat", "sum", "cum", "cum");
  int64_t sum = 0;
  for (size_t i = 0; i < shown; i++) {
    const pprof_top_entry *e = &top->entries[i];
    if (__builtin_add_overflow(sum, e->flat, &sum))
      sum = e->flat > 0 ? INT64_MAX : INT64_MIN;
    format_value(flat, sizeof flat, e->flat, &vf);
    format_value(cum, sizeof cum, e->cum, &vf);
    format_percent(flat_pc, sizeof flat_pc, e->flat, top->total);
    format_percent(sum_pc, sizeof sum_pc, sum, top->total);
    format_percent(cum_pc, sizeof cum_pc, e->cum, top->total);
    printf("%10s %s %s %10s %s  ", flat, flat_pc, sum_pc, cum, cum_pc);
    pprof_fput_escaped(e->name, stdout);
    printf("\n");
  }
}

/* The value of comment "key=<number>" in p; 0 when absent. */
static int comment_number(const pprof_profile *p, const char *key,
                          double *out) {
  size_t klen = strlen(key);
  for (size_t i = 0; i < p->n_comment; i++) {
    const char *c = pprof_str(p, p->comment[i]);
    if (c && strncmp(c, key, klen) == 0 && c[klen] == '=') {
      char *end;
      double v = strtod(c + klen + 1, &end);
      if (end != c + klen + 1 && *end == 0 && v >= 0) {
        *out = v;
        return 1;
      }
    }
  }
  return 0;
}

/* One line on what the profiler cost the profiled process over the inputs
 * (its profiler_* comments, docs/overhead.md); nothing for profiles that do
 * not say (other profilers, older versions, merged files). */
static void print_overhead(pprof_profile *const *profiles, size_t n) {
  double profiler = 0, process = 0, rss = 0;
  size_t with = 0;
  for (size_t i = 0; i < n; i++) {
    double cpu, all, mem = 0;
    if (!comment_number(profiles[i], "profiler_cpu_ns", &cpu) ||
        !comment_number(profiles[i], "process_cpu_ns", &all))
      continue;
    comment_number(profiles[i], "profiler_rss_bytes", &mem);
    profiler += cpu;
    process += all;
    rss = mem > rss ? mem : rss;
    with++;
  }
  if (!with)
    return;
  printf("Profiler overhead: %.2f%% of the process's CPU (%.0f ms of %.0f ms "
         "in %zu profile%s), %.1f MiB held\n",
         process > 0 ? 100 * profiler / process : 0.0, profiler / 1e6,
         process / 1e6, with, with == 1 ? "" : "s", rss / (1024.0 * 1024.0));
}

/* ---- top --base --------------------------------------------------------- */

typedef struct diff_row {
  const char *name;
  double flat[2], cum[2]; /* share of the total in base, new (percent) */
} diff_row;

static double row_key(const diff_row *r, int cum) {
  return fabs(cum ? r->cum[1] - r->cum[0] : r->flat[1] - r->flat[0]);
}

static int diff_row_cmp(const void *a, const void *b) {
  const diff_row *x = a, *y = b;
  for (int cum = 0; cum < 2; cum++)
    if (row_key(x, cum) != row_key(y, cum))
      return row_key(x, cum) > row_key(y, cum) ? -1 : 1;
  return strcmp(x->name, y->name);
}

static double share(int64_t v, int64_t total) {
  return total ? 100.0 * (double)v / (double)total : 0;
}

/* Both tables joined by function name, normalized by their totals, so
 * that profiles of different lengths compare. */
static int print_top_diff(const pprof_top *base, const pprof_top *now,
                          size_t limit) {
  size_t cap = base->nentries + now->nentries, n = 0;
  diff_row *rows = calloc(cap ? cap : 1, sizeof *rows);
  if (!rows)
    return -1;
  for (int side = 0; side < 2; side++) {
    const pprof_top *t = side ? now : base;
    for (size_t i = 0; i < t->nentries; i++) {
      const pprof_top_entry *e = &t->entries[i];
      size_t r = 0;
      if (side) /* linear is fine: tops are thousands of functions */
        for (r = 0; r < n && strcmp(rows[r].name, e->name) != 0; r++)
          ;
      else
        r = n;
      if (r == n)
        rows[n++].name = e->name;
      rows[r].flat[side] = share(e->flat, t->total);
      rows[r].cum[side] = share(e->cum, t->total);
    }
  }
  qsort(rows, n, sizeof *rows, diff_row_cmp);
  printf("Type: ");
  pprof_fput_escaped(now->type, stdout);
  printf("\nShares of the total (base %" PRId64 ", new %" PRId64
         " %s); delta in percentage points\n",
         base->total, now->total, now->unit);
  printf("%10s %9s %8s %10s %9s %8s\n", "base flat", "new flat", "delta",
         "base cum", "new cum", "delta");
  for (size_t i = 0; i < n && i < limit; i++) {
    const diff_row *r = &rows[i];
    printf("%9.2f%% %8.2f%% %+8.2f %9.2f%% %8.2f%% %+8.2f  ", r->flat[0],
           r->flat[1], r->flat[1] - r->flat[0], r->cum[0], r->cum[1],
           r->cum[1] - r->cum[0]);
    pprof_fput_escaped(r->name, stdout);
    printf("\n");
  }
  free(rows);
  return 0;
}

/* "contprof: PREFIX: MESSAGE\n" on stderr, with both escaped: a message
 * may quote a profile's strings, a path may hold anything. */
static void report(const char *prefix, const char *message) {
  fputs("contprof: top: ", stderr);
  pprof_fput_escaped(prefix, stderr);
  fputs(": ", stderr);
  pprof_fput_escaped(message, stderr);
  fputs("\n", stderr);
}

/* Parses -n's argument: a positive integer. */
static int parse_count(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || v == 0 || *s == '-' || v > SIZE_MAX)
    return -1;
  *out = (size_t)v;
  return 0;
}

int cp_cmd_top(int argc, char **argv) {
  size_t limit = SIZE_MAX, npaths = 0, max_memory = PPROF_READ_MAX_MEMORY;
  const char *type = NULL, *base_path = NULL;
  pprof_profile *base = NULL;
  int want_types = 0, status = 0, lines = 0;
  char **paths = calloc(argc > 0 ? (size_t)argc : 1, sizeof *paths);
  pprof_profile **profiles =
      calloc(argc > 0 ? (size_t)argc : 1, sizeof *profiles);
  if (!paths || !profiles) {
    fprintf(stderr, "contprof: out of memory\n");
    free(paths);
    free(profiles);
    return EXIT_INPUT;
  }

  cp_path_list inputs = {0};
  int options_done = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (options_done || a[0] != '-' || strcmp(a, "-") == 0) {
      paths[npaths++] = argv[i];
    } else if (strcmp(a, "--") == 0) {
      options_done = 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      top_usage(stdout);
      goto out;
    } else if (strcmp(a, "-n") == 0 || strncmp(a, "-n=", 3) == 0) {
      const char *v = a[2] == '=' ? a + 3 : (i + 1 < argc ? argv[++i] : NULL);
      if (!v || parse_count(v, &limit) != 0) {
        fprintf(stderr, "contprof: top: -n needs a positive integer\n");
        status = EXIT_USAGE;
        goto out;
      }
    } else if (strcmp(a, "--type") == 0 || strncmp(a, "--type=", 7) == 0) {
      type = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
      if (!type || !*type) {
        fprintf(stderr, "contprof: top: --type needs a sample type name\n");
        status = EXIT_USAGE;
        goto out;
      }
    } else if (strcmp(a, "--max-memory") == 0 ||
               strncmp(a, "--max-memory=", 13) == 0) {
      const char *v = a[12] == '=' ? a + 13 : (i + 1 < argc ? argv[++i] : NULL);
      size_t mib;
      if (!v || parse_count(v, &mib) != 0 || mib > (SIZE_MAX >> 21)) {
        fprintf(stderr, "contprof: top: --max-memory needs a size in MiB\n");
        status = EXIT_USAGE;
        goto out;
      }
      max_memory = mib << 20;
    } else if (strcmp(a, "--base") == 0 || strncmp(a, "--base=", 7) == 0) {
      base_path = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
      if (!base_path || !*base_path) {
        fprintf(stderr, "contprof: top: --base needs a pprof file\n");
        status = EXIT_USAGE;
        goto out;
      }
    } else if (strcmp(a, "--list-types") == 0) {
      want_types = 1;
    } else if (strcmp(a, "--lines") == 0) {
      lines = 1;
    } else {
      fprintf(stderr, "contprof: top: unknown option %s\n", a);
      top_usage(stderr);
      status = EXIT_USAGE;
      goto out;
    }
  }
  if (npaths == 0) {
    top_usage(stderr);
    status = EXIT_USAGE;
    goto out;
  }
  /* A directory stands for its .pb.gz files, as for the other commands; one
   * that cannot be read is reported and the others are still shown. */
  for (size_t i = 0; i < npaths; i++) {
    char err[256];
    if (cp_path_list_add(&inputs, paths[i], err, sizeof err) != 0) {
      fprintf(stderr, "contprof: top: ");
      pprof_fput_escaped(err, stderr);
      fputs("\n", stderr);
      status = EXIT_INPUT;
    }
  }
  /* paths: the list's names, which the readable ones are compacted into
   * below; the list keeps owning them. */
  npaths = 0;
  free(profiles);
  free(paths);
  profiles = calloc(inputs.n ? inputs.n : 1, sizeof *profiles);
  paths = calloc(inputs.n ? inputs.n : 1, sizeof *paths);
  if (!profiles || !paths) {
    fprintf(stderr, "contprof: top: out of memory\n");
    status = EXIT_INPUT;
    goto out;
  }
  memcpy(paths, inputs.v, inputs.n * sizeof *paths);
  npaths = inputs.n;

  /* One budget for every file: what a profile keeps is subtracted before
   * the next one is read. A file that fails is reported and skipped; the
   * others are still shown, and the exit status says one failed. */
  size_t nread = 0;
  if (base_path) {
    char err[256];
    size_t used = 0;
    if (pprof_read_file_within(base_path, max_memory, &used, &base, err,
                               sizeof err) != 0) {
      report(base_path, err);
      status = EXIT_INPUT;
      goto out;
    }
    max_memory = used < max_memory ? max_memory - used : 0;
  }
  for (size_t i = 0; i < npaths; i++) {
    char err[256];
    const char *path = strcmp(paths[i], "-") == 0 ? "/dev/stdin" : paths[i];
    size_t used = 0;
    if (pprof_read_file_within(path, max_memory, &used, &profiles[i], err,
                               sizeof err) != 0) {
      report(paths[i], err);
      status = EXIT_INPUT;
      continue;
    }
    max_memory = used < max_memory ? max_memory - used : 0;
    nread++;
  }
  if (nread == 0)
    goto out;

  if (want_types) {
    list_types(paths, profiles, npaths);
    goto out;
  }

  /* The readable ones, in order. */
  size_t nkept = 0;
  for (size_t i = 0; i < npaths; i++)
    if (profiles[i]) {
      profiles[nkept] = profiles[i];
      paths[nkept++] = paths[i];
    }
  for (size_t i = nkept; i < npaths; i++)
    profiles[i] = NULL;
  npaths = nkept;

  pprof_top top;
  char err[256];
  if (pprof_top_compute_lines((const pprof_profile *const *)profiles, npaths,
                              type, lines, &top, err, sizeof err) != 0) {
    if (type)
      snprintf(err + strlen(err), sizeof err - strlen(err),
               " (see --list-types)");
    report("top", err);
    status = EXIT_INPUT;
    goto out;
  }
  for (size_t i = 0; i < npaths; i++)
    if (pprof_sample_type_index(profiles[i], top.type) < 0) {
      char msg[256];
      snprintf(msg, sizeof msg, "no sample type %s, contributes nothing",
               top.type);
      report(paths[i], msg);
    }
  if (base) {
    pprof_top btop;
    const pprof_profile *one[1] = {base};
    if (pprof_top_compute_lines(one, 1, top.type, lines, &btop, err,
                                sizeof err) != 0) {
      report(base_path, err);
      status = EXIT_INPUT;
    } else if (strcmp(btop.unit, top.unit) != 0) {
      char msg[256];
      snprintf(msg, sizeof msg, "sample type %s is in %s, in %s in the others",
               top.type, btop.unit, top.unit);
      report(base_path, msg);
      status = EXIT_INPUT;
    } else if (print_top_diff(&btop, &top, limit) != 0) {
      fprintf(stderr, "contprof: top: out of memory\n");
      status = EXIT_INPUT;
    }
    pprof_top_free(&btop);
  } else {
    print_overhead(profiles, npaths);
    print_top(&top, limit < top.nentries ? limit : top.nentries);
  }
  pprof_top_free(&top);
  if (fflush(stdout) != 0) {
    fprintf(stderr, "contprof: top: cannot write the output: %s\n",
            strerror(errno));
    status = EXIT_INPUT;
  }

out:
  pprof_profile_free(base);
  for (size_t i = 0; profiles && i < npaths; i++)
    pprof_profile_free(profiles[i]);
  free(profiles);
  free(paths);
  cp_path_list_free(&inputs);
  return status;
}
