/* cp_utc_of (src/common.c) gives the date and time gmtime_r gives, without
 * the C library's time-zone state: at the epoch, around leap days and
 * century years, before 1970, and at a million times drawn from years -2000
 * to 4000. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common.h"
#include "test.h"

static int same_as_gmtime(int64_t secs) {
  time_t t = (time_t)secs;
  struct tm tm;
  if (!gmtime_r(&t, &tm))
    return 1; /* out of gmtime's range: nothing to compare */
  cp_utc u;
  cp_utc_of(secs, &u);
  int same = u.year == tm.tm_year + 1900 && u.month == tm.tm_mon + 1 &&
             u.day == tm.tm_mday && u.hour == tm.tm_hour &&
             u.minute == tm.tm_min && u.second == tm.tm_sec;
  if (!same)
    fprintf(stderr, "%lld: %d-%02d-%02d %02d:%02d:%02d, gmtime %d-%02d-%02d\n",
            (long long)secs, u.year, u.month, u.day, u.hour, u.minute, u.second,
            tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
  return same;
}

static void test_known_times(void) {
  cp_utc u;
  cp_utc_of(0, &u);
  CHECK(u.year == 1970 && u.month == 1 && u.day == 1 && u.hour == 0);
  cp_utc_of(951782400, &u); /* 2000-02-29, a leap day of a century year */
  CHECK(u.year == 2000 && u.month == 2 && u.day == 29);
  cp_utc_of(4107542400, &u); /* 2100-03-01: 2100 is not a leap year */
  CHECK(u.year == 2100 && u.month == 3 && u.day == 1);
  cp_utc_of(-1, &u);
  CHECK(u.year == 1969 && u.month == 12 && u.day == 31 && u.hour == 23 &&
        u.minute == 59 && u.second == 59);
  int64_t edges[] = {0,
                     -1,
                     1,
                     86399,
                     86400,
                     68169599,
                     68169600,
                     951782399,
                     951868799,
                     951868800,
                     4107456000,
                     4107542399,
                     253402300799,
                     -62135596800,
                     -62135596801};
  for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
    CHECK(same_as_gmtime(edges[i]));
}

static void test_random_times(void) {
  uint64_t x = 88172645463325252ull;
  long bad = 0;
  const int64_t lo = -125000000000ll, span = 190000000000ll; /* -2000..4000 */
  for (int i = 0; i < 1000000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    bad += !same_as_gmtime(lo + (int64_t)(x % (uint64_t)span));
  }
  CHECK_EQ_INT(bad, 0);
}

TEST_MAIN(T(test_known_times), T(test_random_times))
