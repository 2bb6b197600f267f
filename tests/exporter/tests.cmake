# The pprof builder, encoder and reader (tests/exporter/test_pprof.c). The
# test also runs `go tool pprof` on the files it writes when go is installed.
cp_unit_test(test_pprof ${CMAKE_CURRENT_SOURCE_DIR}/exporter/test_pprof.c)
# It also runs `contprof top` on hostile files.
add_dependencies(test_pprof contprof_cli)
# CONTPROF_SYMBOLIZE=none, then `contprof symbolize`, equals local.
cp_unit_test(test_symbolize ${CMAKE_CURRENT_SOURCE_DIR}/exporter/test_symbolize.c)
add_dependencies(test_symbolize contprof_cli inline_workload)
