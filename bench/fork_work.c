/* fork_work HELD CHILDREN [SAMPLE_EXIT]: holds HELD 64-byte blocks, then
 * forks CHILDREN children one after another, each of which makes 200
 * malloc/free pairs and leaves with the exit_group system call (no
 * profile written: contprof's _exit hook writes one, as exit does) or,
 * with SAMPLE_EXIT=1, with exit (its profile written). Prints the children's
 * CPU and minor page faults per child (getrusage RUSAGE_CHILDREN): what a
 * forking server pays per child for the profiler's state it inherits. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  int held = atoi(argv[1]), kids = atoi(argv[2]);
  int write_profile = argc > 3 && atoi(argv[3]) == 1;
  void **blocks = calloc((size_t)held + 1, sizeof *blocks);
  for (int i = 0; i < held; i++)
    blocks[i] = malloc(64);
  for (int k = 0; k < kids; k++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < 200; i++)
        free(malloc(64));
      if (write_profile)
        exit(0);
      syscall(SYS_exit_group, 0);
    }
    waitpid(pid, NULL, 0);
  }
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  double ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
              (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  printf("child_cpu_ms=%.3f child_minflt=%ld\n", ms / kids,
         ru.ru_minflt / kids);
  for (int i = 0; i < held; i++)
    free(blocks[i]);
  free(blocks);
  return 0;
}
