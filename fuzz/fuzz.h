/* What the libFuzzer targets of fuzz/ share. */
#ifndef CONTPROF_FUZZ_H
#define CONTPROF_FUZZ_H

/* Any broken invariant is a finding: abort so libFuzzer saves the input. */
#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond))                                                               \
      __builtin_trap();                                                        \
  } while (0)

#endif
