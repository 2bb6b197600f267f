# Uploads against local HTTP servers (Datadog agent, Pyroscope /ingest).
cp_unit_test(test_upload upload/test_upload.c)
target_include_directories(test_upload PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/upload)
set_tests_properties(test_upload PROPERTIES TIMEOUT 120)
