# Aggregator tests (src/aggregator), one cp_unit_test per module. Included
# from tests/CMakeLists.txt, so CMAKE_CURRENT_SOURCE_DIR is tests/.
cp_unit_test(test_symbols
  ${CMAKE_CURRENT_SOURCE_DIR}/aggregator/test_symbols.c
  ${CMAKE_CURRENT_SOURCE_DIR}/aggregator/symbols_fixture.cpp)
cp_unit_test(test_calltree ${CMAKE_CURRENT_SOURCE_DIR}/aggregator/test_calltree.c)
