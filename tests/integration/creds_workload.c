/* Changes its user as `setpriv --reuid` does, for test_creds: keeps its
 * capabilities across the switch (PR_SET_KEEPCAPS), raises them again with
 * capset, then sets its groups (which needs CAP_SETGID on every thread:
 * glibc applies it to each and aborts the process if one fails), then drops
 * every capability. Then prints, for each thread, whether its user, groups
 * and capability sets are the main thread's (the profiler's threads must
 * hold no more than the application's), and how many of them are the
 * profiler's. First a vfork child sets PR_SET_KEEPCAPS on itself (the
 * profiler must not follow that one). Run as root; exits 2 if a step fails. */
#define _GNU_SOURCE
#include <dirent.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOBODY 65534

static int get_caps(struct __user_cap_data_struct data[2]) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  return (int)syscall(SYS_capget, &hdr, data);
}

int capset(cap_user_header_t hdr, const cap_user_data_t data);

static int set_caps(const struct __user_cap_data_struct data[2]) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  return capset(&hdr, (cap_user_data_t)data); /* libc's, as libcap-ng calls */
}

/* The lines of /proc/self/task/TID/status that hold credentials. */
static void creds_of(const char *tid, char *out, size_t cap) {
  char path[300], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
  out[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "Uid:", 4) == 0 || strncmp(line, "Gid:", 4) == 0 ||
        strncmp(line, "Groups:", 7) == 0 || strncmp(line, "Cap", 3) == 0) {
      size_t used = strlen(out);
      snprintf(out + used, cap - used, "%s", line);
    }
  }
  fclose(f);
}

static int is_profiler_thread(const char *tid) {
  char path[300], name[64] = "";
  snprintf(path, sizeof path, "/proc/self/task/%s/comm", tid);
  FILE *f = fopen(path, "r");
  if (f) {
    if (!fgets(name, sizeof name, f))
      name[0] = 0;
    fclose(f);
  }
  return strncmp(name, "contprof", 8) == 0;
}

static void burn(double seconds) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do {
    for (volatile int i = 0; i < 100000; i++)
      ;
    clock_gettime(CLOCK_MONOTONIC, &b);
  } while ((double)(b.tv_sec - a.tv_sec) +
               (double)(b.tv_nsec - a.tv_nsec) / 1e9 <
           seconds);
}

int main(void) {
  burn(0.3); /* the profiler's threads are running */
  /* A vfork child that sets its own flag before it would exec: it shares
   * the parent's memory, not its threads, and must not touch what the
   * parent's threads follow. */
  pid_t child = vfork();
  if (child == 0) {
    prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
    _exit(0);
  }
  int status;
  if (child < 0 || waitpid(child, &status, 0) != child) {
    perror("vfork");
    return 2;
  }
  struct __user_cap_data_struct caps[2];
  if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 ||
      setresuid(NOBODY, NOBODY, NOBODY) != 0 || get_caps(caps) != 0) {
    perror("keep capabilities and switch user");
    return 2;
  }
  caps[0].effective = caps[0].permitted; /* KEEPCAPS keeps only these */
  caps[1].effective = caps[1].permitted;
  if (set_caps(caps) != 0) {
    perror("capset");
    return 2;
  }
  gid_t none[1] = {NOBODY};
  if (setresgid(NOBODY, NOBODY, NOBODY) != 0 || setgroups(1, none) != 0) {
    perror("setresgid / setgroups");
    return 2;
  }
  memset(caps, 0, sizeof caps);
  if (set_caps(caps) != 0 || prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0) {
    perror("drop capabilities");
    return 2;
  }
  burn(0.2);
  char mine[1024], theirs[1024], self[32];
  snprintf(self, sizeof self, "%ld", (long)syscall(SYS_gettid));
  creds_of(self, mine, sizeof mine);
  int threads = 0, profiler = 0, differ = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    threads++;
    profiler += is_profiler_thread(e->d_name);
    creds_of(e->d_name, theirs, sizeof theirs);
    if (strcmp(mine, theirs) != 0) {
      differ++;
      printf("thread %s differs:\n%s", e->d_name, theirs);
    }
  }
  if (d)
    closedir(d);
  printf("threads=%d profiler=%d differ=%d uid=%d\n", threads, profiler, differ,
         (int)getuid());
  return 0;
}
