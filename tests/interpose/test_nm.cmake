# Only the interposition layer replaces libc functions (docs: src/interpose/
# and issue #18): runs `nm --defined-only` over the built objects and fails
# if any of the functions src/interpose/exports.map lists is defined by an
# object not built from src/interpose/, if the hook objects miss one of
# them, or if the contprof command defines one. Also that no two objects
# share a file name: the Python binding takes libcontprof.a apart with
# `ar x`, where one would overwrite the other.
#   cmake -DNM=nm -DMAP=exports.map -DHOOKS=a.o|b.o -DOTHERS=c.o|d.o
#         -DBINARIES=contprof -P test_nm.cmake
cmake_minimum_required(VERSION 3.16)
foreach(v NM MAP HOOKS OTHERS BINARIES)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "test_nm: ${v} not given")
  endif()
  string(REPLACE "|" ";" ${v} "${${v}}")
endforeach()

# The interposed names: the map's `name;` lines (contprof_* is the API).
file(STRINGS ${MAP} map_lines REGEX "^[ \t]+[A-Za-z_0-9]+;")
set(interposed "")
foreach(line ${map_lines})
  string(STRIP "${line}" line)
  string(REPLACE ";" "" name "${line}")
  list(APPEND interposed ${name})
endforeach()
list(LENGTH interposed ninterposed)
if(ninterposed LESS 40)
  message(FATAL_ERROR "test_nm: only ${ninterposed} names read from ${MAP}")
endif()

# The names among `interposed` that `file` defines (any defined symbol).
function(defined_in file out)
  execute_process(COMMAND ${NM} --defined-only -P ${file}
    OUTPUT_VARIABLE text RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "test_nm: nm ${file} failed: ${err}")
  endif()
  string(REPLACE "\n" ";" lines "${text}")
  set(found "")
  foreach(line ${lines})
    string(REGEX MATCH "^[^ ]+" sym "${line}")
    string(REGEX REPLACE "@.*" "" sym "${sym}")
    if(sym AND sym IN_LIST interposed)
      list(APPEND found ${sym})
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

set(failures 0)
foreach(obj ${OTHERS} ${BINARIES})
  defined_in(${obj} found)
  if(found)
    message(SEND_ERROR "${obj} defines ${found}: only src/interpose/ may")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()

set(by_hooks "")
foreach(obj ${HOOKS})
  if(NOT obj MATCHES "/src/interpose/")
    message(SEND_ERROR "${obj} is not built from src/interpose/")
    math(EXPR failures "${failures} + 1")
  endif()
  defined_in(${obj} found)
  list(APPEND by_hooks ${found})
endforeach()
foreach(name ${interposed})
  if(NOT name IN_LIST by_hooks)
    message(SEND_ERROR "${name} is exported (${MAP}) but no src/interpose/ object defines it")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()

set(names "")
foreach(obj ${HOOKS} ${OTHERS})
  get_filename_component(name ${obj} NAME)
  if(name IN_LIST names)
    message(SEND_ERROR "two objects are named ${name}: `ar x` of libcontprof.a keeps one")
    math(EXPR failures "${failures} + 1")
  endif()
  list(APPEND names ${name})
endforeach()

list(LENGTH OTHERS nothers)
list(LENGTH HOOKS nhooks)
if(failures)
  message(FATAL_ERROR "test_nm: ${failures} failure(s)")
endif()
message(STATUS "test_nm: ${ninterposed} functions, defined only by the ${nhooks} "
  "objects of src/interpose/ (${nothers} other objects and the command checked)")
