# Uploads against local HTTP servers (Datadog agent, Pyroscope /ingest).
cp_unit_test(test_upload upload/test_upload.c)
target_include_directories(test_upload PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/upload)
set_tests_properties(test_upload PROPERTIES TIMEOUT 120)
# test_stuck_sink_exit's getaddrinfo must be the one the dlopened libcurl
# calls.
target_link_options(test_upload PRIVATE -Wl,--export-dynamic-symbol=getaddrinfo)

# Files the sinks write and read against a hostile local user: planted links,
# untrusted output and spool directories, planted spool files (issue #15).
cp_unit_test(test_upload_files upload/test_upload_files.c)
target_include_directories(test_upload_files PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/upload)
add_dependencies(test_upload_files contprof_preload)
set_tests_properties(test_upload_files PROPERTIES TIMEOUT 120)

# Oversized service names and tags (bounded in config.c and the Pyroscope
# sink), in the default _FORTIFY_SOURCE=2 build and under ASan.
cp_unit_test(test_names upload/test_names.c)
target_include_directories(test_names PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/upload)
set_tests_properties(test_names PROPERTIES TIMEOUT 120)
