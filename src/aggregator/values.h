/* The sample values every profile can carry: one count and one quantity per
 * sample kind (contprof_sample_kind), at fixed indexes. */
#ifndef CP_VALUES_H
#define CP_VALUES_H

#include "contprof/runtime.h"

enum {
  CP_V_CPU_SAMPLES = 0,
  CP_V_CPU_TIME,
  CP_V_WALL_SAMPLES,
  CP_V_WALL_TIME,
  CP_V_ALLOC_SAMPLES,
  CP_V_ALLOC_SPACE,
  CP_V_INUSE_OBJECTS,
  CP_V_INUSE_SPACE,
  CP_V_LOCK_ACQUIRE,
  CP_V_LOCK_WAIT,
  CP_NVALUES
};

/* Index of the count of a kind; the quantity follows it. */
static inline int cp_kind_value_index(contprof_sample_kind kind) {
  return 2 * (int)kind;
}

#endif
