cp_unit_test(test_safe_read shared/test_safe_read.c)
