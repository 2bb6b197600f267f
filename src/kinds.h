/* The one table of sample kinds: what each contprof_sample_kind is (its
 * profile bit, its count and quantity values, their names and units in each
 * dialect, its name in CONTPROF_PROFILES). Every layer reads it; it depends
 * on nothing but the public enum. */
#ifndef CP_KINDS_H
#define CP_KINDS_H

#include <stddef.h>

#include "contprof/runtime.h"

/* The profile of kind k is bit 1 << k (CONTPROF_PROFILES, cp_config's
 * profiles, CONTPROF_SELF in the bindings' API). */
enum {
  CP_PROFILE_CPU = 1u << CONTPROF_KIND_CPU,
  CP_PROFILE_WALL = 1u << CONTPROF_KIND_WALL,
  CP_PROFILE_ALLOC = 1u << CONTPROF_KIND_ALLOC,
  CP_PROFILE_HEAP = 1u << CONTPROF_KIND_INUSE,
  CP_PROFILE_LOCK = 1u << CONTPROF_KIND_LOCK,
  CP_PROFILE_ALL = (1u << CONTPROF_KIND_COUNT) - 1,
};

/* Every sample carries one count and one quantity per kind, at fixed
 * indexes: the count of kind k at 2k, its quantity at 2k + 1. */
enum {
  CP_V_CPU_SAMPLES = 2 * CONTPROF_KIND_CPU,
  CP_V_CPU_TIME,
  CP_V_WALL_SAMPLES = 2 * CONTPROF_KIND_WALL,
  CP_V_WALL_TIME,
  CP_V_ALLOC_SAMPLES = 2 * CONTPROF_KIND_ALLOC,
  CP_V_ALLOC_SPACE,
  CP_V_INUSE_OBJECTS = 2 * CONTPROF_KIND_INUSE,
  CP_V_INUSE_SPACE,
  CP_V_LOCK_ACQUIRE = 2 * CONTPROF_KIND_LOCK,
  CP_V_LOCK_WAIT,
  CP_NVALUES = 2 * CONTPROF_KIND_COUNT
};

/* A pprof value type: sample_type's type and unit. */
typedef struct cp_value_name {
  const char *type;
  const char *unit;
} cp_value_name;

/* How one dialect of pprof names a kind (docs/formats.md). */
typedef struct cp_kind_dialect {
  cp_value_name values[2]; /* the count, the quantity */
  /* period_type, and the default sample type when this kind's profile
   * decides them (NULL: it never does in this dialect) */
  cp_value_name period;
  const char *default_type;
} cp_kind_dialect;

typedef struct cp_kind_info {
  const char *name; /* in CONTPROF_PROFILES and the profiles' comments */
  unsigned profile; /* CP_PROFILE_* */
  /* The kind whose sampler takes this kind's samples and whose rate and
   * slowdown it follows: the live heap is sampled with the allocations. */
  contprof_sample_kind sampled_as;
  cp_kind_dialect datadog;
  cp_kind_dialect pyroscope;
  /* Pyroscope takes one profile per family (its names repeat across
   * families): kinds next to each other with the same family go together. */
  const char *pyroscope_family;
} cp_kind_info;

extern const cp_kind_info cp_kinds[CONTPROF_KIND_COUNT];

/* Index of the count of a kind; the quantity follows it. */
static inline int cp_kind_value_index(contprof_sample_kind kind) {
  return 2 * (int)kind;
}

/* The kind of the lowest CP_PROFILE_* bit in profile (a sampler's). */
static inline contprof_sample_kind cp_kind_of_profile(unsigned profile) {
  return (contprof_sample_kind)__builtin_ctz(profile);
}

/* The CP_PROFILE_* bits of the Pyroscope family that kind k begins; 0 when
 * k is not the first kind of its family. */
unsigned cp_kind_pyroscope_family(contprof_sample_kind k);

/* The CP_PROFILE_* bit named `name` (case-insensitive), 0 for none. */
unsigned cp_kind_profile_named(const char *name);

#endif
