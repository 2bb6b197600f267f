add_executable(workload integration/workload.c)
target_link_libraries(workload PRIVATE Threads::Threads m)
target_compile_options(workload PRIVATE -O1)
set_target_properties(workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

target_link_libraries(workload PRIVATE ${CMAKE_DL_LIBS})
add_library(cp_test_plugin SHARED integration/plugin.c)
set_target_properties(cp_test_plugin PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

cp_unit_test(test_cpu_profile integration/test_cpu_profile.c)
add_dependencies(test_cpu_profile workload cp_test_plugin contprof_cli
  contprof_preload)
set_tests_properties(test_cpu_profile PROPERTIES TIMEOUT 300)

# Explicit-link mode: the test links libcontprof.so like a C service would.
add_executable(test_api integration/test_api.c)
target_link_libraries(test_api PRIVATE contprof contprof_pprof_reader
  Threads::Threads)
target_include_directories(test_api PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(test_api PRIVATE _GNU_SOURCE)
add_test(NAME test_api COMMAND test_api)

add_test(NAME test_install COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_install.sh
  ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
