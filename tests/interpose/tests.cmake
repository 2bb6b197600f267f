# The interposition layer (src/interpose/): only its objects define libc
# functions, and the contprof command defines none (test_nm.cmake).
add_test(NAME test_nm COMMAND ${CMAKE_COMMAND}
  -DNM=${CMAKE_NM}
  -DMAP=${CMAKE_SOURCE_DIR}/src/interpose/exports.map
  "-DHOOKS=$<JOIN:$<TARGET_OBJECTS:contprof_hooks>,|>"
  "-DOTHERS=$<JOIN:$<TARGET_OBJECTS:contprof_objects>,|>|$<JOIN:$<TARGET_OBJECTS:contprof_nohooks>,|>"
  -DBINARIES=$<TARGET_FILE:contprof_cli>
  -P ${CMAKE_CURRENT_SOURCE_DIR}/interpose/test_nm.cmake)
