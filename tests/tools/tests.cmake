# The local view (tests/tools/test_local_view.c): contprof merge, folded,
# flame and diff run as commands; go tool pprof reads what merge writes.
cp_unit_test(test_local_view ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_local_view.c)
add_dependencies(test_local_view contprof_cli)
