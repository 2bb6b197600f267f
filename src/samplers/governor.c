/* The overhead governor (see governor.h). Once a second it reads what the
 * profiler has cost since its last decision (stats.h: its threads' CPU, its
 * handlers and hooks per kind, the process's CPU) and, when the share is
 * over the cap, gives each sampler a slowdown factor that brings it under:
 * the budget is shared out from the cheapest sampler up, so a sampler that
 * costs little keeps its rate and the one that costs most slows most. When
 * the share falls under half the cap, the factors come down again. Factors
 * are whole numbers (a sample stands for that many configured periods);
 * each sampler keeps its totals unbiased as it changes (sampler.h). */
#include "governor.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "stats.h"

/* A decision needs this many seconds of data, counted from a second after
 * the last change, and looks at most this many back. */
#define WINDOW_MIN 2
#define WINDOW_MAX 5
/* The profiler may always use this much CPU a second, whatever the cap
 * says: in a process that is idle but for it, its share is near 100% by
 * construction, and slowing it to a share of almost nothing would leave the
 * idle process's wall profile a few windows of seconds each. At the
 * defaults with every profile an idle process's profiler uses 1.3-1.7 ms a
 * second on this VM (docs/overhead.md, "The cap"), so it is not slowed.
 * Every process of a server gets it: 5 ms (it was) let each PostgreSQL
 * backend, under 250 ms of CPU a second, spend 5 ms where a 2% cap says
 * 3.6. */
#define ALLOWANCE_NS_PER_S 2000000ull
/* The floors: below these rates a profile says too little. */
#define CPU_FLOOR_HZ 5
#define WALL_FLOOR_INTERVAL_NS 1000000000ull
#define ALLOC_FLOOR_MEAN_BYTES (256.0 * 1024 * 1024)
#define LOCK_FLOOR_MEAN_NS 1e9
#define MAX_SLOWDOWN 65536u
/* Seconds over which the fixed part (exports, uploads) is averaged. */
#define FIXED_AVERAGE_S 60.0
/* Nor is the allocation sampler slowed when it takes fewer samples a
 * second than this, the lock sampler fewer than a fifth of it: below, their
 * totals' error grows faster than their cost falls (100 allocation samples
 * a second cost 1-3 ms of CPU, at most 0.15% of two cores, and put the
 * standard error of a minute's alloc-space near 1.3%). The CPU and wall
 * samplers' floors are their rates per thread. */
#define MIN_ALLOC_SAMPLES_PER_S 100.0

typedef struct governed {
  const cp_sampler *sampler;
  contprof_sample_kind kind; /* where its hooks' time and samples count */
  unsigned factor;
  unsigned max_factor;
  double min_rate; /* samples a second it is never slowed below */
} governed;

static struct {
  pthread_mutex_t lock;
  double cap_pct;                  /* 0: off */
  governed g[CONTPROF_KIND_COUNT]; /* a sampler per kind at most */
  size_t n;
  cp_stats_totals history[WINDOW_MAX + 1];
  size_t nhistory;
  double fixed_share; /* the fixed part over the process's CPU; -1: none */
} gov = {.lock = PTHREAD_MUTEX_INITIALIZER};

static unsigned clamp_factor(double f, unsigned max) {
  if (!(f >= 1))
    return 1;
  if (f > (double)max)
    return max;
  return (unsigned)f;
}

/* The most the sampler of `kind` may be slowed: to its floor rate. */
static unsigned max_factor_of(contprof_sample_kind kind, const cp_config *cfg) {
  double f = 1;
  switch (kind) {
  case CONTPROF_KIND_CPU:
    f = (double)cfg->cpu_hz / CPU_FLOOR_HZ;
    break;
  case CONTPROF_KIND_WALL:
    f = (double)WALL_FLOOR_INTERVAL_NS / ((double)cfg->wall_interval_ms * 1e6);
    break;
  case CONTPROF_KIND_ALLOC:
  case CONTPROF_KIND_INUSE:
    f = ALLOC_FLOOR_MEAN_BYTES / (double)cfg->alloc_sample_bytes;
    break;
  case CONTPROF_KIND_LOCK:
    f = LOCK_FLOOR_MEAN_NS / (double)cfg->lock_sample_ns;
    break;
  default:
    break;
  }
  return clamp_factor(f, MAX_SLOWDOWN);
}

static void set_factor(governed *g, unsigned factor) {
  if (factor == g->factor)
    return;
  g->factor = factor;
  g->sampler->slow_down(factor);
  cp_stats_set_slowdown(g->kind, factor);
}

void cp_governor_start(const cp_config *cfg, const cp_sampler *const *active,
                       size_t n) {
  pthread_mutex_lock(&gov.lock);
  gov.cap_pct = cfg->max_overhead_pct;
  gov.n = 0;
  gov.nhistory = 0;
  gov.fixed_share = -1;
  for (size_t i = 0; i < n && gov.n < CP_ARRAY_SIZE(gov.g); i++) {
    const cp_sampler *s = active[i];
    if (!s->slow_down)
      continue;
    governed *g = &gov.g[gov.n++];
    g->sampler = s;
    g->kind = cp_kind_of_profile(s->profile);
    g->factor = 1;
    g->max_factor = max_factor_of(g->kind, cfg);
    g->min_rate = g->kind == CONTPROF_KIND_ALLOC  ? MIN_ALLOC_SAMPLES_PER_S
                  : g->kind == CONTPROF_KIND_LOCK ? MIN_ALLOC_SAMPLES_PER_S / 5
                                                  : 0;
    cp_stats_set_slowdown(g->kind, 1);
  }
  pthread_mutex_unlock(&gov.lock);
}

void cp_governor_stop(void) {
  pthread_mutex_lock(&gov.lock);
  gov.n = 0;
  gov.nhistory = 0;
  pthread_mutex_unlock(&gov.lock);
}

void cp_governor_after_fork_child(void) {
  pthread_mutex_init(&gov.lock, NULL);
  gov.n = 0;
  gov.nhistory = 0;
}

/* g's factor (> 1) after speeding it up by `speed`: at most twice as fast a
 * step, and at least one step. */
static unsigned sped_up(const governed *g, double speed) {
  unsigned f = clamp_factor(floor((double)g->factor / (speed < 2 ? speed : 2)),
                            g->max_factor);
  return f < g->factor ? f : g->factor - 1;
}

/* Shares the budget out. A sampler taking fewer samples than its min_rate
 * is not slowed (a slowed one is sped up towards that rate): its cost comes off
 * the budget first. The rest is shared from the cheapest sampler up, each
 * one's part an equal share of what the cheaper ones left: a sampler over
 * its part is slowed to it (cost goes as 1 / factor; 10% to spare), so the
 * costly one slows most. When the whole is under the cap, a slowed sampler
 * under half of its part is sped up towards 70% of it, at most twice as fast
 * a step: one slowed too far (its cost over-estimated while an export of the
 * old rates' samples ran) comes back. Returns 1 if a factor changed. */
static int rebalance(const double *cost, const double *rate, double budget,
                     int under_cap) {
  size_t order[CONTPROF_KIND_COUNT], n = 0;
  int changed = 0;
  for (size_t i = 0; i < gov.n; i++) {
    governed *g = &gov.g[i];
    if (rate[i] >= g->min_rate) {
      order[n++] = i;
      continue;
    }
    budget -= cost[i];
    if (g->factor > 1) {
      set_factor(g, sped_up(g, g->min_rate / (rate[i] > 1 ? rate[i] : 1)));
      changed = 1;
    }
  }
  for (size_t i = 1; i < n; i++) /* a handful: insertion sort */
    for (size_t j = i; j > 0 && cost[order[j]] < cost[order[j - 1]]; j--) {
      size_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  double left = budget > 0 ? budget : 0;
  for (size_t r = 0; r < n; r++) {
    size_t i = order[r];
    governed *g = &gov.g[i];
    double part = left / (double)(n - r);
    left -= cost[i] < part ? cost[i] : part;
    unsigned f = g->factor;
    if (cost[i] > part) {
      f = part > 0
              ? clamp_factor(ceil((double)g->factor * cost[i] / part * 1.1),
                             g->max_factor)
              : g->max_factor;
    } else if (under_cap && g->factor > 1 && cost[i] < part / 2) {
      f = sped_up(g, cost[i] > 0 ? 0.7 * part / cost[i] : 2);
    }
    if (f != g->factor) {
      set_factor(g, f);
      changed = 1;
    }
  }
  return changed;
}

void cp_governor_tick(void) {
  pthread_mutex_lock(&gov.lock);
  if (gov.n == 0 || gov.cap_pct <= 0) {
    pthread_mutex_unlock(&gov.lock);
    return;
  }
  cp_stats_totals now;
  cp_stats_totals_read(&now);
  if (gov.nhistory == WINDOW_MAX + 1) {
    memmove(gov.history, gov.history + 1, WINDOW_MAX * sizeof *gov.history);
    gov.nhistory--;
  }
  gov.history[gov.nhistory++] = now;
  size_t seconds = gov.nhistory - 1;
  const cp_stats_totals *then = &gov.history[0];
  uint64_t process = now.process_cpu_ns - then->process_cpu_ns;
  if (seconds < WINDOW_MIN || process == 0) {
    pthread_mutex_unlock(&gov.lock);
    return;
  }
  /* Each sampler's cost: its handlers' and hooks' time, the kernel's side
   * of its signals (as measured: kernel_cost.h), its own thread's
   * (the wall timer), and a share of the aggregator's draining in
   * proportion to its samples. The rest of the profiler's threads' work
   * (exports, uploads) is mostly paid per period whatever the rates: it
   * comes off the budget. */
  double shared = (double)(now.threads_cpu_ns - then->threads_cpu_ns);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
    shared -=
        (double)(now.kind_threads_cpu_ns[k] - then->kind_threads_cpu_ns[k]);
  double drain = (double)(now.drain_ns - then->drain_ns);
  if (drain > shared)
    drain = shared;
  double fixed = shared > drain ? shared - drain : 0;
  double samples[CONTPROF_KIND_COUNT], all_samples = 0,
                                       cost[CONTPROF_KIND_COUNT], total = fixed;
  for (size_t i = 0; i < gov.n; i++) {
    contprof_sample_kind k = gov.g[i].kind;
    samples[i] = (double)(now.samples[k] - then->samples[k]);
    all_samples += samples[i];
  }
  for (size_t i = 0; i < gov.n; i++) {
    contprof_sample_kind k = gov.g[i].kind;
    double share =
        all_samples > 0 ? samples[i] / all_samples : 1.0 / (double)gov.n;
    cost[i] =
        (double)(now.hook_ns[k] - then->hook_ns[k]) +
        (double)(now.kernel_ns[k] - then->kernel_ns[k]) +
        (double)(now.kind_threads_cpu_ns[k] - then->kind_threads_cpu_ns[k]) +
        drain * share;
    total += cost[i];
  }
  double overhead_pct = 100.0 * total / (double)process;
  /* The samplers keep at least a quarter of the cap, whatever that part
   * costs: slowing them cannot make exports cheaper than their floor (a
   * thread rescan of 500 threads, an export every 2 s), and profiles still
   * have to be worth their price. A process whose fixed part is over the
   * cap stays over it, and its profiles say so. */
  /* An export lands in one window a period: the fixed part is taken as
   * its share of the process's CPU averaged over about a minute, so that
   * the rates do not dip after each export. */
  double fixed_share = fixed / (double)process;
  double weight = (double)seconds / FIXED_AVERAGE_S;
  gov.fixed_share = gov.fixed_share < 0
                        ? fixed_share
                        : gov.fixed_share + (fixed_share - gov.fixed_share) *
                                                (weight < 1 ? weight : 1);
  double cap = gov.cap_pct / 100.0 * (double)process;
  if (cap < (double)(ALLOWANCE_NS_PER_S * seconds))
    cap = (double)(ALLOWANCE_NS_PER_S * seconds);
  double smoothed = gov.fixed_share * (double)process;
  double budget = cap - smoothed > cap / 4 ? cap - smoothed : cap / 4;
  total += smoothed - fixed;
  double rate[CONTPROF_KIND_COUNT];
  for (size_t i = 0; i < gov.n; i++)
    rate[i] = samples[i] / (double)seconds;
  int changed = rebalance(cost, rate, budget, total < cap);
  if (changed) {
    char factors[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < gov.n && used < sizeof factors; i++) {
      int w =
          snprintf(factors + used, sizeof factors - used, "%s%s x%u (%.2f%%)",
                   used ? ", " : "", gov.g[i].sampler->name, gov.g[i].factor,
                   100.0 * cost[i] / (double)process);
      if (w > 0)
        used += (size_t)w;
    }
    cp_info("profiler overhead %.2f%% (cap %.2f%%; by sampler before the "
            "change): sampling now slower by %s",
            overhead_pct, gov.cap_pct, factors);
    /* The next decision sees only the new rates, from a second after the
     * change on: until then the aggregator drains what the old rates put in
     * the ring, and a countdown in progress keeps its old mean. */
    gov.nhistory = 0;
  }
  pthread_mutex_unlock(&gov.lock);
}
