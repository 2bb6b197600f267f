add_executable(workload integration/workload.c)
target_link_libraries(workload PRIVATE Threads::Threads m)
target_compile_options(workload PRIVATE -O1)
set_target_properties(workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

target_link_libraries(workload PRIVATE ${CMAKE_DL_LIBS})
add_library(cp_test_plugin SHARED integration/plugin.c)
set_target_properties(cp_test_plugin PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

# The profiler without hooks in a library loaded with dlopen, as the Python
# and Ruby extensions load it: libunwind's thread-local data is then made on
# demand, with malloc.
add_library(cp_dlopen_profiler SHARED $<TARGET_OBJECTS:contprof_objects>
  $<TARGET_OBJECTS:contprof_nohooks>)
target_link_libraries(cp_dlopen_profiler PRIVATE PkgConfig::UNWIND
  PkgConfig::PROTOBUFC ZLIB::ZLIB Threads::Threads
  ${CMAKE_DL_LIBS} m)
target_link_options(cp_dlopen_profiler PRIVATE -Wl,-z,nodelete)
set_target_properties(cp_dlopen_profiler PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

cp_unit_test(test_cpu_profile integration/test_cpu_profile.c)
add_dependencies(test_cpu_profile workload cp_test_plugin contprof_cli
  contprof_preload cp_dlopen_profiler)
set_tests_properties(test_cpu_profile PROPERTIES TIMEOUT 300)

# fork: pre-fork servers, each process its own profile.
cp_unit_test(test_fork integration/test_fork.c)
add_dependencies(test_fork workload contprof_cli contprof_preload)
set_tests_properties(test_fork PROPERTIES TIMEOUT 120)

# exec: followed images, the LD_PRELOAD policy, failed exec, vfork.
add_executable(exec_bigenv integration/exec_bigenv.c)
target_link_libraries(exec_bigenv PRIVATE Threads::Threads)
set_target_properties(exec_bigenv PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_exec integration/test_exec.c)
add_dependencies(test_exec workload exec_bigenv contprof_cli contprof_preload)
set_tests_properties(test_exec PROPERTIES TIMEOUT 180)

# Explicit-link mode: the test links libcontprof.so like a C service would.
add_executable(test_api integration/test_api.c)
target_link_libraries(test_api PRIVATE contprof contprof_pprof_reader
  Threads::Threads)
target_include_directories(test_api PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(test_api PRIVATE _GNU_SOURCE)
add_test(NAME test_api COMMAND test_api)

# Self-telemetry: the profiler's reported CPU against the kernel's count.
add_executable(test_overhead integration/test_overhead.c)
target_link_libraries(test_overhead PRIVATE contprof contprof_pprof_reader
  Threads::Threads m)
target_include_directories(test_overhead PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(test_overhead PRIVATE _GNU_SOURCE)
add_test(NAME test_overhead COMMAND test_overhead)
set_tests_properties(test_overhead PROPERTIES TIMEOUT 120)

# The overhead cap: a pathological program, with and without it.
add_executable(overhead_workload integration/overhead_workload.c)
target_link_libraries(overhead_workload PRIVATE Threads::Threads)
target_compile_options(overhead_workload PRIVATE -O2 -g)
set_target_properties(overhead_workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_governor integration/test_governor.c)
add_dependencies(test_governor overhead_workload contprof_cli contprof_preload)
set_tests_properties(test_governor PROPERTIES TIMEOUT 180)

# Label memory: bounded values, sets freed when unheld (issue #15, item 7).
add_executable(test_labels integration/test_labels.c)
target_link_libraries(test_labels PRIVATE contprof contprof_pprof_reader
  Threads::Threads)
target_include_directories(test_labels PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(test_labels PRIVATE _GNU_SOURCE)
add_test(NAME test_labels COMMAND test_labels)

add_test(NAME test_install COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_install.sh
  ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})

# Wall-clock sampler, labels on wall samples, trace correlation, timeline.
add_executable(wall_workload integration/wall_workload.c)
target_link_libraries(wall_workload PRIVATE Threads::Threads)
target_compile_options(wall_workload PRIVATE -O1)
set_target_properties(wall_workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_wall integration/test_wall.c)
add_dependencies(test_wall wall_workload contprof_cli contprof_preload)
set_tests_properties(test_wall PROPERTIES TIMEOUT 180)

# Lock sampler: a workload run under `contprof run` and the same one linked
# with libcontprof.so (it starts the profiler itself).
add_executable(lock_workload integration/lock_workload.c)
target_link_libraries(lock_workload PRIVATE Threads::Threads m)
add_executable(lock_workload_linked integration/lock_workload.c)
target_compile_definitions(lock_workload_linked PRIVATE LOCK_WORKLOAD_LINKED)
target_link_libraries(lock_workload_linked PRIVATE contprof Threads::Threads m)
set_target_properties(lock_workload lock_workload_linked PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_lock_profile integration/test_lock_profile.c)
add_dependencies(test_lock_profile lock_workload lock_workload_linked
  contprof_cli contprof_preload)
set_tests_properties(test_lock_profile PROPERTIES TIMEOUT 120)

# Allocation and live-heap profiles (alloc.c): programs with known
# allocations under `contprof run`, and the library linked explicitly.
add_executable(alloc_workload integration/alloc_workload.c)
target_link_libraries(alloc_workload PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
target_compile_options(alloc_workload PRIVATE -O1 -g)
set_target_properties(alloc_workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_alloc_profile integration/test_alloc_profile.c)
# Built without -fPIE: malloc and free exported as canonical PLT entries.
add_executable(nopie_alloc integration/nopie_alloc.c)
target_link_libraries(nopie_alloc PRIVATE Threads::Threads)
set_target_properties(nopie_alloc PROPERTIES POSITION_INDEPENDENT_CODE OFF
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_compile_options(nopie_alloc PRIVATE -fno-pie -O1)
target_link_options(nopie_alloc PRIVATE -no-pie)
add_dependencies(test_alloc_profile alloc_workload nopie_alloc contprof_cli
  contprof_preload)
set_tests_properties(test_alloc_profile PROPERTIES TIMEOUT 180)
add_executable(test_alloc_api integration/test_alloc_api.c)
target_link_libraries(test_alloc_api PRIVATE contprof contprof_pprof_reader
  Threads::Threads)
target_include_directories(test_alloc_api PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(test_alloc_api PRIVATE _GNU_SOURCE)
add_test(NAME test_alloc_api COMMAND test_alloc_api)

# Blocking calls are not cut short by the wall sampler's signals: a program
# run under `contprof run --profiles wall,cpu` with a 1 ms wall interval,
# which prints a line per call and fails if any call returned early.
function(cp_wall_sampled_test name exe source)
  add_executable(${exe} ${source})
  target_link_libraries(${exe} PRIVATE Threads::Threads ${ARGN})
  target_compile_definitions(${exe} PRIVATE _GNU_SOURCE) # ppoll
  set_target_properties(${exe} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name}
    COMMAND ${CMAKE_BINARY_DIR}/contprof run --profiles wall,cpu
            --output ${CMAKE_BINARY_DIR}/tests/${exe}-profiles --
            ${CMAKE_BINARY_DIR}/tests/${exe})
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "CONTPROF_WALL_INTERVAL_MS=1")
endfunction()
cp_wall_sampled_test(test_blocking_calls blocking_calls
  integration/blocking_calls.c)

# The calls made directly while the application has one thread
# (src/interpose/direct.h): the same results, an interposer behind ours
# still called, cancellation as without the profiler (direct_calls.c).
add_library(cp_direct_shim SHARED integration/direct_shim.c)
set_target_properties(cp_direct_shim PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
target_link_libraries(cp_direct_shim PRIVATE ${CMAKE_DL_LIBS})
cp_wall_sampled_test(test_direct_calls direct_calls
  integration/direct_calls.c ${CMAKE_DL_LIBS})
add_dependencies(direct_calls cp_direct_shim)
set_property(TEST test_direct_calls APPEND PROPERTY ENVIRONMENT
  "LD_PRELOAD=$<TARGET_FILE:cp_direct_shim>")

# libaio's waits, likewise (when libaio is installed: scripts/deps test).
find_library(CONTPROF_LIBAIO aio)
find_path(CONTPROF_LIBAIO_INCLUDE libaio.h)
if(CONTPROF_LIBAIO AND CONTPROF_LIBAIO_INCLUDE)
  cp_wall_sampled_test(test_aio_wait aio_wait integration/aio_wait.c
    ${CONTPROF_LIBAIO})
  target_include_directories(aio_wait PRIVATE ${CONTPROF_LIBAIO_INCLUDE})
else()
  message(STATUS "libaio not found (scripts/deps test installs libaio-dev): "
                 "test_aio_wait skipped")
endif()

# Hostile programs (signals, exits, dlopen) under every profile: they behave
# exactly as without the profiler (test_hardening.c).
add_executable(hostile_workload integration/hostile_workload.c)
target_link_libraries(hostile_workload PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
target_compile_options(hostile_workload PRIVATE -O1 -g)
set_target_properties(hostile_workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_hardening integration/test_hardening.c)
add_dependencies(test_hardening hostile_workload cp_test_plugin contprof_cli
  contprof_preload)
set_tests_properties(test_hardening PROPERTIES TIMEOUT 240)

# An application that puts its own sockets and files on descriptors 3..63
# while sampled: none is read, written or closed by the unwinding, and the
# process does not hang (test_unwind_descriptors.c).
add_executable(fd_takeover_workload integration/fd_takeover_workload.c)
target_link_libraries(fd_takeover_workload PRIVATE Threads::Threads)
target_compile_options(fd_takeover_workload PRIVATE -O1 -g)
set_target_properties(fd_takeover_workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_unwind_descriptors integration/test_unwind_descriptors.c)
add_dependencies(test_unwind_descriptors fd_takeover_workload contprof_cli
  contprof_preload)
set_tests_properties(test_unwind_descriptors PROPERTIES TIMEOUT 120)

# The preload path under valgrind's memcheck: every sampler on in a
# multithreaded program (test_valgrind.c; bench/soak.sh runs it for long).
add_executable(mixed_workload integration/mixed_workload.c)
target_link_libraries(mixed_workload PRIVATE Threads::Threads)
target_compile_options(mixed_workload PRIVATE -O1 -g)
set_target_properties(mixed_workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_valgrind integration/test_valgrind.c)
add_dependencies(test_valgrind mixed_workload contprof_preload)
set_tests_properties(test_valgrind PROPERTIES TIMEOUT 240)

# Privileged programs: a setuid-root copy of a program linked with
# libcontprof.so, run as nobody with a hostile environment (needs root).
add_executable(setuid_prog integration/setuid_prog.c)
target_link_libraries(setuid_prog PRIVATE contprof)
set_target_properties(setuid_prog PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_setuid integration/test_setuid.c)
add_dependencies(test_setuid setuid_prog workload contprof_preload)
set_tests_properties(test_setuid PROPERTIES TIMEOUT 120)

# DWARF lines and inline chains (#16): a -O2 -g program with always-inlined
# hot helpers, checked against addr2line -i.
add_executable(inline_workload integration/inline_workload.c)
target_compile_options(inline_workload PRIVATE -O2 -g)
set_target_properties(inline_workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_library(cp_no_libdw SHARED integration/no_libdw.c)
target_link_libraries(cp_no_libdw PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(cp_no_libdw PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_lines integration/test_lines.c)
add_dependencies(test_lines inline_workload contprof_cli contprof_preload
  cp_no_libdw)
set_tests_properties(test_lines PROPERTIES TIMEOUT 180)

# CONTPROF_UNWIND on a program built with frame pointers and without: the
# profiles' call chains (test_fp_profile.c).
add_executable(fp_workload_fp integration/fp_workload.c)
target_compile_options(fp_workload_fp PRIVATE -O2 -fno-omit-frame-pointer
  -mno-omit-leaf-frame-pointer)
add_executable(fp_workload_nofp integration/fp_workload.c)
target_compile_options(fp_workload_nofp PRIVATE -O2 -fomit-frame-pointer)
set_target_properties(fp_workload_fp fp_workload_nofp PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_fp_profile integration/test_fp_profile.c)
add_dependencies(test_fp_profile fp_workload_fp fp_workload_nofp contprof_cli
  contprof_preload)
set_tests_properties(test_fp_profile PROPERTIES TIMEOUT 240)

# Credentials: a program that changes its user as setpriv --reuid does
# (PR_SET_KEEPCAPS, capset, then its groups) while profiled (needs root).
add_executable(creds_workload integration/creds_workload.c)
set_target_properties(creds_workload PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
cp_unit_test(test_creds integration/test_creds.c)
add_dependencies(test_creds creds_workload contprof_cli contprof_preload)
set_tests_properties(test_creds PROPERTIES TIMEOUT 120)
