cp_unit_test(test_config config/test_config.c)
