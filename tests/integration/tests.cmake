add_executable(workload integration/workload.c)
target_link_libraries(workload PRIVATE Threads::Threads m)
target_compile_options(workload PRIVATE -O1)
set_target_properties(workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

cp_unit_test(test_cpu_profile integration/test_cpu_profile.c)
add_dependencies(test_cpu_profile workload contprof_cli contprof_preload)
set_tests_properties(test_cpu_profile PROPERTIES TIMEOUT 300)
