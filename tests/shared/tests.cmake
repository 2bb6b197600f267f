cp_unit_test(test_safe_read shared/test_safe_read.c)
cp_unit_test(test_own_fd shared/test_own_fd.c)
# fork and the loader's lock (src/fork_guard.c).
cp_unit_test(test_fork_guard shared/test_fork_guard.c)
# Calendar dates without the C library's time zone (src/common.c).
cp_unit_test(test_utc shared/test_utc.c)
# Timing the handlers and hooks: the clock's own cost taken off (src/stats.c).
cp_unit_test(test_hook_timing shared/test_hook_timing.c)
