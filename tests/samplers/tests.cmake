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
