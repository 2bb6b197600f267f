cp_unit_test(test_lock ${CMAKE_CURRENT_SOURCE_DIR}/samplers/test_lock.c)
set_tests_properties(test_lock PROPERTIES TIMEOUT 120)
# The malloc hooks' contract and the live table (alloc.c, heap_table.c).
cp_unit_test(test_alloc samplers/test_alloc.c)
# GCC assumes built-in allocation functions leave errno alone; the test
# checks what they really do.
target_compile_options(test_alloc PRIVATE -fno-builtin -Wno-use-after-free)
set_tests_properties(test_alloc PROPERTIES TIMEOUT 120)
# unwind.c's memory accessor for libunwind: unreadable addresses fail,
# registers that point nowhere end the stack (test_unwind.c).
cp_unit_test(test_unwind samplers/test_unwind.c)
# The frame-pointer walker against libunwind at the same signals, on code
# built with frame pointers and through an object built without
# (test_fpwalk.c).
add_library(cp_fpwalk_nofp SHARED samplers/fpwalk_nofp.c)
target_compile_options(cp_fpwalk_nofp PRIVATE -O2 -fomit-frame-pointer)
cp_unit_test(test_fpwalk samplers/test_fpwalk.c)
target_compile_options(test_fpwalk PRIVATE -O1 -fno-omit-frame-pointer
  -mno-omit-leaf-frame-pointer)
target_link_libraries(test_fpwalk PRIVATE cp_fpwalk_nofp)
set_tests_properties(test_fpwalk PROPERTIES TIMEOUT 120)
# The thread registry with the pthread_create hook (test_threads.c), and
# signal installation with the interposed sigaction, signal and signal waits
# (test_signals.c).
cp_unit_test(test_threads samplers/test_threads.c)
cp_unit_test(test_signals samplers/test_signals.c)
