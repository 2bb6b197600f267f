cp_unit_test(test_config config/test_config.c)
cp_unit_test(test_privileged config/test_privileged.c)
