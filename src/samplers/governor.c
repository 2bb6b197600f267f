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

/* A decision needs this many seconds of data since the last change (the
 * samplers take up to a period to follow one), and looks at most this many
 * back. */
#define WINDOW_MIN 2
#define WINDOW_MAX 5
/* A process using less CPU than this per second is idle: a share of almost
 * nothing says nothing. */
#define IDLE_CPU_NS_PER_S 10000000ull
/* The floors: below these rates a profile says too little. */
#define CPU_FLOOR_HZ 5
#define WALL_FLOOR_INTERVAL_NS 1000000000ull
#define ALLOC_FLOOR_MEAN_BYTES (256.0 * 1024 * 1024)
#define LOCK_FLOOR_MEAN_NS 1e9
#define MAX_SLOWDOWN 65536u

typedef struct governed {
  const cp_sampler *sampler;
  contprof_sample_kind kind; /* where its hooks' time and samples count */
  unsigned factor;
  unsigned max_factor;
} governed;

static struct {
  pthread_mutex_t lock;
  double cap_pct; /* 0: off */
  governed g[8];
  size_t n;
  cp_stats_totals history[WINDOW_MAX + 1];
  size_t nhistory;
} gov = {.lock = PTHREAD_MUTEX_INITIALIZER};

static unsigned clamp_factor(double f, unsigned max) {
  if (!(f >= 1))
    return 1;
  if (f > (double)max)
    return max;
  return (unsigned)f;
}

/* The most a sampler may be slowed: to its floor rate. */
static unsigned max_factor_of(const cp_sampler *s, const cp_config *cfg) {
  double f = 1;
  if (s->profile & CP_PROFILE_CPU)
    f = (double)cfg->cpu_hz / CPU_FLOOR_HZ;
  else if (s->profile & CP_PROFILE_WALL)
    f = (double)WALL_FLOOR_INTERVAL_NS / ((double)cfg->wall_interval_ms * 1e6);
  else if (s->profile & (CP_PROFILE_ALLOC | CP_PROFILE_HEAP))
    f = ALLOC_FLOOR_MEAN_BYTES / (double)cfg->alloc_sample_bytes;
  else if (s->profile & CP_PROFILE_LOCK)
    f = LOCK_FLOOR_MEAN_NS / (double)cfg->lock_sample_ns;
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
  for (size_t i = 0; i < n && gov.n < CP_ARRAY_SIZE(gov.g); i++) {
    const cp_sampler *s = active[i];
    if (!s->slow_down)
      continue;
    governed *g = &gov.g[gov.n++];
    g->sampler = s;
    g->kind = (contprof_sample_kind)__builtin_ctz(s->profile);
    g->factor = 1;
    g->max_factor = max_factor_of(s, cfg);
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

/* Over the cap: shares the budget out from the cheapest sampler up (each
 * gets what it costs, or an equal part of what is left if that is less)
 * and slows each one to its part. Returns 1 if a factor changed. */
static int slow_down(const double *cost, double budget) {
  size_t order[8];
  for (size_t i = 0; i < gov.n; i++)
    order[i] = i;
  for (size_t i = 1; i < gov.n; i++) /* a handful: insertion sort */
    for (size_t j = i; j > 0 && cost[order[j]] < cost[order[j - 1]]; j--) {
      size_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  int changed = 0;
  double left = budget;
  for (size_t r = 0; r < gov.n; r++) {
    size_t i = order[r];
    double fair = left / (double)(gov.n - r);
    double allowed = cost[i] < fair ? cost[i] : fair;
    left -= allowed;
    if (cost[i] <= allowed || allowed <= 0)
      continue;
    /* Cost goes as 1 / factor; 10% margin against the next window's
     * noise. */
    governed *g = &gov.g[i];
    unsigned f = clamp_factor(ceil((double)g->factor * cost[i] / allowed * 1.1),
                              g->max_factor);
    if (f > g->factor) {
      set_factor(g, f);
      changed = 1;
    }
  }
  return changed;
}

/* Under half the cap: speeds every slowed sampler up towards 70% of it, at
 * most twice as fast per step. Returns 1 if a factor changed. */
static int speed_up(double overhead_pct) {
  double speed = overhead_pct > 0 ? 0.7 * gov.cap_pct / overhead_pct : 2;
  if (speed > 2)
    speed = 2;
  int changed = 0;
  for (size_t i = 0; i < gov.n; i++) {
    governed *g = &gov.g[i];
    if (g->factor <= 1)
      continue;
    unsigned f = clamp_factor(floor((double)g->factor / speed), g->max_factor);
    if (f >= g->factor)
      f = g->factor - 1;
    set_factor(g, f);
    changed = 1;
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
  if (seconds < WINDOW_MIN || process < IDLE_CPU_NS_PER_S * seconds) {
    pthread_mutex_unlock(&gov.lock);
    return;
  }
  /* Each sampler's cost: its handlers' and hooks' time, and a share of the
   * profiler's threads (draining, exporting) in proportion to its samples. */
  double threads = (double)(now.threads_cpu_ns - then->threads_cpu_ns);
  double samples[8], all_samples = 0, cost[8], total = 0;
  for (size_t i = 0; i < gov.n; i++) {
    contprof_sample_kind k = gov.g[i].kind;
    samples[i] = (double)(now.samples[k] - then->samples[k]);
    all_samples += samples[i];
  }
  for (size_t i = 0; i < gov.n; i++) {
    contprof_sample_kind k = gov.g[i].kind;
    double share =
        all_samples > 0 ? samples[i] / all_samples : 1.0 / (double)gov.n;
    cost[i] = (double)(now.hook_ns[k] - then->hook_ns[k]) + threads * share;
    total += cost[i];
  }
  double overhead_pct = 100.0 * total / (double)process;
  int changed = 0;
  if (overhead_pct > gov.cap_pct)
    changed = slow_down(cost, gov.cap_pct / 100.0 * (double)process);
  else if (overhead_pct < gov.cap_pct / 2)
    changed = speed_up(overhead_pct);
  if (changed) {
    char factors[128] = "";
    size_t used = 0;
    for (size_t i = 0; i < gov.n && used < sizeof factors; i++) {
      int w =
          snprintf(factors + used, sizeof factors - used, "%s%s x%u",
                   used ? ", " : "", gov.g[i].sampler->name, gov.g[i].factor);
      if (w > 0)
        used += (size_t)w;
    }
    cp_info("profiler overhead %.2f%% (cap %.2f%%): sampling slowed down by "
            "%s",
            overhead_pct, gov.cap_pct, factors);
    /* The next decision sees only the new rates. */
    gov.history[0] = now;
    gov.nhistory = 1;
  }
  pthread_mutex_unlock(&gov.lock);
}
