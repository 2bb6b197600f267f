cp_unit_test(test_config config/test_config.c)
cp_unit_test(test_privileged config/test_privileged.c)
add_test(NAME test_config_documented
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/config/check_documented.sh
          ${CMAKE_SOURCE_DIR})
