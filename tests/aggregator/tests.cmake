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
# PLT stubs (test_symbols): a program built for IBT, whose stubs are in
# .plt.sec, and one not position-independent. Only read, never run.
add_executable(plt_ibt aggregator/plt_fixture.c)
target_compile_options(plt_ibt PRIVATE -O2 -fcf-protection=full)
target_link_options(plt_ibt PRIVATE -Wl,-z,ibtplt)
add_executable(plt_nopie aggregator/plt_fixture.c)
target_compile_options(plt_nopie PRIVATE -O2 -fno-pie)
target_link_options(plt_nopie PRIVATE -no-pie)
foreach(fixture plt_ibt plt_nopie)
  target_link_libraries(${fixture} PRIVATE m)
  set_target_properties(${fixture} PROPERTIES POSITION_INDEPENDENT_CODE OFF
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
endforeach()
add_dependencies(test_symbols plt_ibt plt_nopie)
