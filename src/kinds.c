/* The table of sample kinds (kinds.h): every name and unit a kind has in
 * configuration and in each pprof dialect (docs/formats.md). */
#include "kinds.h"

#include <string.h>
#include <strings.h>

const cp_kind_info cp_kinds[CONTPROF_KIND_COUNT] =
    {
        [CONTPROF_KIND_CPU] =
            {
                .name = "cpu",
                .profile = CP_PROFILE_CPU,
                .sampled_as = CONTPROF_KIND_CPU,
                .datadog = {.values = {{"cpu-samples", "count"},
                                       {"cpu-time", "nanoseconds"}},
                            .period = {"cpu", "nanoseconds"},
                            .default_type = "cpu-time"},
                .pyroscope = {.values = {{"samples", "count"},
                                         {"cpu", "nanoseconds"}},
                              .period = {"cpu", "nanoseconds"},
                              .default_type = "cpu"},
                .pyroscope_family = "process_cpu",
            },
        [CONTPROF_KIND_WALL] =
            {
                .name = "wall",
                .profile = CP_PROFILE_WALL,
                .sampled_as = CONTPROF_KIND_WALL,
                .datadog = {.values = {{"wall-samples", "count"},
                                       {"wall-time", "nanoseconds"}},
                            .period = {"wall", "nanoseconds"},
                            .default_type = "wall-time"},
                .pyroscope = {.values = {{"samples", "count"},
                                         {"wall", "nanoseconds"}},
                              .period = {"wall", "nanoseconds"},
                              .default_type = "wall"},
                .pyroscope_family = "wall",
            },
        [CONTPROF_KIND_ALLOC] =
            {
                .name = "alloc",
                .profile = CP_PROFILE_ALLOC,
                .sampled_as = CONTPROF_KIND_ALLOC,
                .datadog = {.values = {{"alloc-samples", "count"},
                                       {"alloc-space", "bytes"}}},
                .pyroscope = {.values = {{"alloc_objects", "count"},
                                         {"alloc_space", "bytes"}},
                              .period = {"space", "bytes"},
                              .default_type = "alloc_space"},
                .pyroscope_family = "memory",
            },
        [CONTPROF_KIND_INUSE] =
            {
                .name = "heap",
                .profile = CP_PROFILE_HEAP,
                .sampled_as = CONTPROF_KIND_ALLOC,
                .datadog = {.values = {{"inuse-objects", "count"},
                                       {"inuse-space", "bytes"}}},
                .pyroscope = {.values = {{"inuse_objects", "count"},
                                         {"inuse_space", "bytes"}},
                              .period = {"space", "bytes"},
                              .default_type = "inuse_space"},
                .pyroscope_family = "memory",
            },
        [CONTPROF_KIND_LOCK] =
            {
                .name = "lock",
                .profile = CP_PROFILE_LOCK,
                .sampled_as = CONTPROF_KIND_LOCK,
                .datadog = {.values = {{"lock-acquire", "count"},
                                       {"lock-acquire-wait", "nanoseconds"}}},
                .pyroscope = {.values = {{"contentions", "count"},
                                         {"delay", "nanoseconds"}},
                              .period = {"contentions", "count"},
                              .default_type = "delay"},
                .pyroscope_family = "mutex",
            },
};

unsigned cp_kind_pyroscope_family(contprof_sample_kind k) {
  if ((unsigned)k >= CONTPROF_KIND_COUNT ||
      (k > 0 && strcmp(cp_kinds[k - 1].pyroscope_family,
                       cp_kinds[k].pyroscope_family) == 0))
    return 0;
  unsigned bits = 0;
  for (int j = k;
       j < CONTPROF_KIND_COUNT &&
       strcmp(cp_kinds[j].pyroscope_family, cp_kinds[k].pyroscope_family) == 0;
       j++)
    bits |= cp_kinds[j].profile;
  return bits;
}

unsigned cp_kind_profile_named(const char *name) {
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
    if (strcasecmp(name, cp_kinds[k].name) == 0)
      return cp_kinds[k].profile;
  return 0;
}
