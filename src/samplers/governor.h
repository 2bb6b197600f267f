/* The governor: keeps what the profiler costs under CONTPROF_MAX_OVERHEAD_PCT
 * of the process's CPU by slowing the samplers down, and speeds them up
 * again when there is room (docs/overhead.md, "The cap"). */
#ifndef CP_GOVERNOR_H
#define CP_GOVERNOR_H

#include <stddef.h>

#include "config.h"
#include "sampler.h"

/* The samplers that run (they must stay valid until cp_governor_stop). */
void cp_governor_start(const cp_config *cfg, const cp_sampler *const *active,
                       size_t n);
/* Once a second, on the aggregator's thread. */
void cp_governor_tick(void);
/* Forgets the samplers; after it returns, no tick touches them. */
void cp_governor_stop(void);
/* In the child of fork. */
void cp_governor_after_fork_child(void);

#endif
