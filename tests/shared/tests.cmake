cp_unit_test(test_safe_read shared/test_safe_read.c)
cp_unit_test(test_own_fd shared/test_own_fd.c)
