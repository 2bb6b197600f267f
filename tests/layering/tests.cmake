# The layering of docs/architecture.md: which folder may include which
# (check_includes.sh reads the source tree, not the build).
add_test(NAME test_layering
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_includes.sh ${CMAKE_SOURCE_DIR})
