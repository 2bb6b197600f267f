# Uploads against local HTTP servers (Datadog agent, Pyroscope /ingest).
cp_unit_test(test_upload upload/test_upload.c)
target_include_directories(test_upload PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/upload)
set_tests_properties(test_upload PROPERTIES TIMEOUT 120)

# Oversized service names and tags (bounded in config.c and the Pyroscope
# sink), in the default _FORTIFY_SOURCE=2 build and under ASan.
cp_unit_test(test_names upload/test_names.c)
target_include_directories(test_names PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/upload)
set_tests_properties(test_names PROPERTIES TIMEOUT 120)
