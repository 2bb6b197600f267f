/* A program whose calls go through PLT stubs, built for IBT (.plt.sec)
 * and without -pie (tests/aggregator/test_symbols.c, PLT stubs). It is
 * only read, never run by the tests. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv) {
  double s = 0;
  for (int i = 0; i < argc * 1000; i++)
    s += sin(i) + atof(argv[0]);
  qsort(argv, (size_t)argc, sizeof *argv, cmp);
  printf("%f %s\n", s, argv[0]);
  return 0;
}
