cp_unit_test(test_pprof exporter/test_pprof.c)
