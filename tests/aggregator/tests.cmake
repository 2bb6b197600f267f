# Aggregator tests (src/aggregator), one cp_unit_test per module. Included
# from tests/CMakeLists.txt, so CMAKE_CURRENT_SOURCE_DIR is tests/.
cp_unit_test(test_symbols
  ${CMAKE_CURRENT_SOURCE_DIR}/aggregator/test_symbols.c
  ${CMAKE_CURRENT_SOURCE_DIR}/aggregator/symbols_fixture.cpp)
cp_unit_test(test_calltree ${CMAKE_CURRENT_SOURCE_DIR}/aggregator/test_calltree.c)
cp_unit_test(test_ring ${CMAKE_CURRENT_SOURCE_DIR}/aggregator/test_ring.c)
# DWARF lines: inline_workload (tests/integration) as built, stripped,
# compressed and with DWARF 4.
add_executable(inline_workload_dwarf4 integration/inline_workload.c)
target_compile_options(inline_workload_dwarf4 PRIVATE -O2 -gdwarf-4)
set_target_properties(inline_workload_dwarf4 PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_dwarf ${CMAKE_CURRENT_SOURCE_DIR}/aggregator/test_dwarf.c)
# It reads files with libdw itself, to compare with ours.
target_link_libraries(test_dwarf PRIVATE PkgConfig::DW)
add_dependencies(test_dwarf inline_workload inline_workload_dwarf4
  cp_test_plugin)
add_executable(inline_workload_cpp integration/inline_workload_cpp.cpp)
target_compile_options(inline_workload_cpp PRIVATE -O2 -g)
set_target_properties(inline_workload_cpp PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_dependencies(test_dwarf inline_workload_cpp)
