/* Code built without frame pointers (-fomit-frame-pointer -O2), for
 * test_fpwalk: a recursion whose frames keep no rbp chain and use rbp as an
 * ordinary register, calling back into code that does. */
#include <stdint.h>

typedef void (*fpwalk_cb)(void);

/* Many values live across the call: GCC takes rbp as a general register. */
__attribute__((noinline)) uint64_t fpwalk_nofp_recurse(int depth, fpwalk_cb cb,
                                                       uint64_t seed) {
  volatile uint64_t v[4];
  uint64_t a = seed * 3 + 1, b = seed ^ 0x55, c = seed + 7, d = seed * 5,
           e = seed - 3, f = seed << 2, g = seed >> 1, h = ~seed;
  if (depth > 0)
    a += fpwalk_nofp_recurse(depth - 1, cb, a ^ b);
  else
    cb();
  v[0] = a + b;
  v[1] = c * d;
  v[2] = e ^ f;
  v[3] = g + h;
  return v[0] + v[1] + v[2] + v[3] + a * b * c * d * e * f * g * h;
}
