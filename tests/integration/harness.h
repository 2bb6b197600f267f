/* Helpers for integration tests: run a command (capturing stdout, getting its
 * status and rusage), list and decode the profiles it wrote. */
#ifndef CP_HARNESS_H
#define CP_HARNESS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

#include "exporter/pprof_read.h"

typedef struct run_result {
  int status;
  struct rusage usage;
  char out[65536];
} run_result;

/* Runs argv (argv[0] a path) with stdout captured; extra env "K=V" strings
 * (NULL-terminated, may be NULL) are set in the child. */
static inline int run_command(char *const argv[], const char *const *env,
                              run_result *r) {
  int pipefd[2];
  if (pipe(pipefd) != 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 1);
    close(pipefd[0]);
    close(pipefd[1]);
    for (; env && *env; env++)
      putenv((char *)*env);
    execv(argv[0], argv);
    _exit(127);
  }
  close(pipefd[1]);
  size_t used = 0;
  ssize_t n;
  while ((n = read(pipefd[0], r->out + used, sizeof r->out - 1 - used)) > 0)
    used += (size_t)n;
  r->out[used] = 0;
  close(pipefd[0]);
  return wait4(pid, &r->status, 0, &r->usage) == pid ? 0 : -1;
}

/* `bash -c cmd` with env (may be NULL), checked to exit 0; its result on
 * the heap (free it). For a command line with redirections or limits
 * (`2>&1`, `ulimit`). */
static inline run_result *run_shell(const char *cmd, const char *const *env) {
  char *argv[] = {"/bin/bash", "-c", (char *)cmd, NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, env, r), 0);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  return r;
}

static inline double rusage_cpu_seconds(const struct rusage *u) {
  return (double)u->ru_utime.tv_sec + (double)u->ru_utime.tv_usec / 1e6 +
         (double)u->ru_stime.tv_sec + (double)u->ru_stime.tv_usec / 1e6;
}

/* A fresh directory under /tmp. */
static char *make_temp_dir(const char *tag) {
  static char path[4][128];
  static int next;
  char *p = path[next++ % 4];
  snprintf(p, 128, "/tmp/contprof-%s-XXXXXX", tag);
  return mkdtemp(p);
}

/* Decodes every *.pb.gz in dir into profiles[]; returns the count. */
static inline size_t read_profiles(const char *dir, pprof_profile **profiles,
                                   size_t max, char names[][512]) {
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < max) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 6, ".pb.gz") != 0)
      continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    char err[256];
    if (pprof_read_file(path, &profiles[n], err, sizeof err) != 0) {
      fprintf(stderr, "cannot read %s: %s\n", path, err);
      continue;
    }
    if (names)
      snprintf(names[n], 512, "%.500s", path);
    n++;
  }
  closedir(d);
  return n;
}

static inline void remove_dir(const char *dir) {
  if (getenv("CP_TEST_KEEP"))
    return;
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' &&
        (e->d_name[1] == 0 || (e->d_name[1] == '.' && e->d_name[2] == 0)))
      continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* The value of a profile's "key=value" comment, or NULL. */
static inline const char *profile_comment(const pprof_profile *p,
                                          const char *key) {
  size_t len = strlen(key);
  for (size_t i = 0; i < p->n_comment; i++) {
    const char *c = pprof_str(p, p->comment[i]);
    if (c && strncmp(c, key, len) == 0 && c[len] == '=')
      return c + len + 1;
  }
  return NULL;
}

/* The first function name of location loc if it is in a libcontprof
 * mapping, else NULL. */
static inline const char *profiler_location(const pprof_profile *p,
                                            uint64_t loc_id) {
  const Perftools__Profiles__Location *loc = pprof_find_location(p, loc_id);
  const Perftools__Profiles__Mapping *map =
      loc ? pprof_find_mapping(p, loc->mapping_id) : NULL;
  if (!map || !strstr(pprof_str(p, map->filename), "libcontprof"))
    return NULL;
  const char *names[4];
  return pprof_location_functions(p, loc, names, 4) ? names[0] : "?";
}

/* How many samples of profile p with a value of type `type`, and with a
 * function whose name starts with `under` in their stack (NULL: every
 * sample), have a frame of the profiler's own (a location in a libcontprof
 * mapping) at position `first` from the leaf or above: from 1, a function
 * of ours between two of the application's, which the stacks leave out
 * (src/passthrough.h); from 0, also a leaf of ours. The first such frame's
 * function goes to stderr. */
static inline size_t profiler_frames_inside(const pprof_profile *p,
                                            const char *type, size_t first,
                                            const char *under) {
  int t = pprof_sample_type_index(p, type);
  size_t bad = 0;
  for (size_t s = 0; t >= 0 && s < p->n_sample; s++) {
    const Perftools__Profiles__Sample *sm = p->sample[s];
    if (sm->value[t] == 0)
      continue;
    int found = under == NULL;
    for (size_t f = 0; !found && f < sm->n_location_id; f++) {
      const Perftools__Profiles__Location *loc =
          pprof_find_location(p, sm->location_id[f]);
      const char *names[4];
      size_t nn = loc ? pprof_location_functions(p, loc, names, 4) : 0;
      for (size_t k = 0; k < nn && !found; k++)
        found = strncmp(names[k], under, strlen(under)) == 0;
    }
    if (!found)
      continue;
    for (size_t f = first; f < sm->n_location_id; f++) {
      const char *ours = profiler_location(p, sm->location_id[f]);
      if (!ours)
        continue;
      if (!bad)
        fprintf(stderr,
                "a frame of the profiler's in a %s stack, %zu from "
                "its leaf: %s\n",
                type, f, ours);
      bad++;
      break;
    }
  }
  return bad;
}

/* The flat value of function `name` in a top table, 0 if absent. */
static inline int64_t top_flat(const pprof_top *top, const char *name) {
  for (size_t i = 0; i < top->nentries; i++)
    if (strcmp(top->entries[i].name, name) == 0)
      return top->entries[i].flat;
  return 0;
}

static inline int64_t top_cum(const pprof_top *top, const char *name) {
  for (size_t i = 0; i < top->nentries; i++)
    if (strcmp(top->entries[i].name, name) == 0)
      return top->entries[i].cum;
  return 0;
}

/* The threads of this process whose name starts with prefix
 * ("contprof-": all of ours): the ns each spent on the CPU (the sum,
 * returned, from schedstat) and the times each went to sleep (*wakeups:
 * voluntary_ctxt_switches from status; a preemption on a loaded machine
 * is not one), and how many threads matched; -1 when one cannot be read. */
static inline double threads_from_proc(const char *prefix, int *nthreads,
                                       long long *wakeups) {
  DIR *d = opendir("/proc/self/task");
  if (!d)
    return -1;
  double sum = 0;
  *nthreads = 0;
  if (wakeups)
    *wakeups = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char path[300], comm[64] = "", line[128];
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    if (!fgets(comm, sizeof comm, f))
      comm[0] = 0;
    fclose(f);
    if (strncmp(comm, prefix, strlen(prefix)) != 0)
      continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
    f = fopen(path, "r");
    unsigned long long run_ns = 0, sleeps = 0;
    int ok = f && fscanf(f, "%llu", &run_ns) == 1;
    if (f)
      fclose(f);
    if (ok && wakeups) {
      snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
      f = fopen(path, "r");
      ok = 0;
      while (f && !ok && fgets(line, sizeof line, f))
        ok = sscanf(line, "voluntary_ctxt_switches: %llu", &sleeps) == 1;
      if (f)
        fclose(f);
    }
    if (!ok) {
      closedir(d);
      return -1;
    }
    sum += (double)run_ns;
    if (wakeups)
      *wakeups += (long long)sleeps;
    ++*nthreads;
  }
  closedir(d);
  return sum;
}

#endif
