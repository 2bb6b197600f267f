/* C++ code for test_symbols: a method, a function template and a class
 * template member, each reporting a pc inside itself, whose names must come
 * back demangled. */
#include <stdint.h>

extern "C" {
uintptr_t fixture_method_pc(void);
uintptr_t fixture_function_template_pc(void);
uintptr_t fixture_class_template_pc(void);
}

/* The caller's pc (return address - 1), as a profiler sees the caller. */
extern "C" __attribute__((noinline)) uintptr_t fixture_caller_pc(void) {
  return (uintptr_t)__builtin_return_address(0) - 1;
}

namespace fixture {

static uintptr_t last_pc;

class Widget {
public:
  int spin(int n);
};

__attribute__((noinline)) int Widget::spin(int n) {
  last_pc = fixture_caller_pc(); /* not a tail call: the sum follows */
  int sum = 0;
  for (int i = 0; i < n; i++)
    sum += i;
  return sum;
}

template <typename T> __attribute__((noinline)) T twice(T v) {
  last_pc = fixture_caller_pc();
  return v + v;
}

template <typename T> struct Box {
  T value;
  __attribute__((noinline)) T get() const {
    last_pc = fixture_caller_pc();
    return value * 3;
  }
};

} // namespace fixture

/* Calls go through volatile pointers: the compiler can then neither inline
 * nor call a specialised clone (".constprop", ".isra") with another name. */
static volatile int fixture_arg = 3;
static volatile long fixture_sink;

extern "C" uintptr_t fixture_method_pc(void) {
  int (fixture::Widget::*volatile spin)(int) = &fixture::Widget::spin;
  fixture::Widget w;
  fixture_sink = (w.*spin)(fixture_arg);
  return fixture::last_pc;
}

extern "C" uintptr_t fixture_function_template_pc(void) {
  int (*volatile twice)(int) = &fixture::twice<int>;
  fixture_sink = twice(fixture_arg);
  return fixture::last_pc;
}

extern "C" uintptr_t fixture_class_template_pc(void) {
  long (fixture::Box<long>::*volatile get)() const = &fixture::Box<long>::get;
  fixture::Box<long> box = {fixture_arg};
  fixture_sink = (box.*get)();
  return fixture::last_pc;
}
