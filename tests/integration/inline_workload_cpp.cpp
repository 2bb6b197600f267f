// The C++ counterpart of inline_workload.c for test_dwarf: the hot loop is
// an always-inlined member function of a class template, so its inline
// frame must carry the demangled name (Accumulator<unsigned long>::mix).
#include <cstdio>
#include <cstdlib>

template <typename T> struct Accumulator {
  T state;
  __attribute__((always_inline)) inline void mix(long n) {
    for (long i = 0; i < n; i++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      state ^= state >> 29;
      __asm__ volatile("" : "+r"(state));
    }
  }
};

__attribute__((noinline)) static unsigned long cpp_driver(unsigned long x,
                                                          long n) {
  Accumulator<unsigned long> a{x};
  a.mix(n);
  return a.state;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 1000;
  std::printf("%lu\n", cpp_driver(1, n));
  return 0;
}
