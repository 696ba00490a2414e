# cmake -P script behind the consumer CTest test: installs delayq, then builds
# and runs, against that install, the README's first program with the
# README's CMake lines (tests/consumer/CMakeLists.txt) and main.cpp.
# Inputs (all -D):
#   DELAYQ_BUILD_DIR      the delayq build tree to install (already built)
#   DELAYQ_CONFIG         its configuration ($<CONFIG>; may be empty)
#   DELAYQ_README         README.md
#   CONSUMER_SOURCE_DIR   tests/consumer
#   CONSUMER_WORK_DIR     scratch space: <work>/prefix, <work>/src, <work>/build
#   CONSUMER_GENERATOR    generator for the consumer build
#   CONSUMER_CXX_COMPILER compiler for the consumer build
cmake_minimum_required(VERSION 3.21)

foreach(var DELAYQ_BUILD_DIR DELAYQ_README CONSUMER_SOURCE_DIR CONSUMER_WORK_DIR CONSUMER_GENERATOR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${CONSUMER_WORK_DIR}/prefix")
set(src "${CONSUMER_WORK_DIR}/src")
set(build "${CONSUMER_WORK_DIR}/build")
# Start clean so a stale install or cache cannot make the test pass.
file(REMOVE_RECURSE "${prefix}" "${src}" "${build}")

# The README's code as shown: its first C++ block becomes my_service.cpp, and
# every line of its CMake blocks must stand in the consumer's CMakeLists.txt.
include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/readme_blocks.cmake")
delayq_readme_blocks("${DELAYQ_README}" cpp "${CONSUMER_WORK_DIR}/readme" readme_cpp)
delayq_readme_blocks("${DELAYQ_README}" cmake "${CONSUMER_WORK_DIR}/readme" readme_cmake)
if(NOT readme_cpp OR NOT readme_cmake)
  message(FATAL_ERROR "consumer: ${DELAYQ_README} has no ```cpp or no ```cmake block")
endif()
file(COPY "${CONSUMER_SOURCE_DIR}/" DESTINATION "${src}")
list(GET readme_cpp 0 first_program)
file(COPY_FILE "${first_program}" "${src}/my_service.cpp")
# Whole lines of code, so that a README line quoted in a comment, or
# standing inside a longer line, does not count. (Lines are CMake list
# items here: a line with a ';' would be split. The README's have none.)
file(STRINGS "${CONSUMER_SOURCE_DIR}/CMakeLists.txt" consumer_raw)
set(consumer_code "")
foreach(line IN LISTS consumer_raw)
  string(STRIP "${line}" line)
  if(line AND NOT line MATCHES "^#")
    list(APPEND consumer_code "${line}")
  endif()
endforeach()
foreach(block IN LISTS readme_cmake)
  file(STRINGS "${block}" readme_lines)
  foreach(line IN LISTS readme_lines)
    string(STRIP "${line}" line)
    if(NOT line)
      continue()
    endif()
    list(FIND consumer_code "${line}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "consumer: README.md says \"${line}\", which "
        "tests/consumer/CMakeLists.txt does not: the README's CMake lines are untested")
    endif()
  endforeach()
endforeach()

function(step what)
  message(STATUS "consumer: ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer: ${what} failed (${rc})")
  endif()
endfunction()

set(config_args "")
if(NOT "${DELAYQ_CONFIG}" STREQUAL "")
  set(config_args --config "${DELAYQ_CONFIG}")
endif()

step("install ${DELAYQ_BUILD_DIR} into ${prefix}"
  "${CMAKE_COMMAND}" --install "${DELAYQ_BUILD_DIR}" --prefix "${prefix}" ${config_args})

set(compiler_args "")
if(NOT "${CONSUMER_CXX_COMPILER}" STREQUAL "")
  set(compiler_args "-DCMAKE_CXX_COMPILER=${CONSUMER_CXX_COMPILER}")
endif()
step("configure ${src} (tests/consumer with the README's program)"
  "${CMAKE_COMMAND}" -S "${src}" -B "${build}"
  -G "${CONSUMER_GENERATOR}" ${compiler_args}
  "-DCMAKE_PREFIX_PATH=${prefix}"
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
  -DCMAKE_BUILD_TYPE=Release)
# The package must come from the scratch prefix, not from some other install.
file(STRINGS "${build}/CMakeCache.txt" found_dir REGEX "^delayq_DIR:")
string(REGEX REPLACE "^delayq_DIR:[A-Z]+=" "" found_dir "${found_dir}")
string(FIND "${found_dir}" "${prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "consumer: found delayq in '${found_dir}', expected under ${prefix}")
endif()
step("build" "${CMAKE_COMMAND}" --build "${build}" --config Release)

find_program(consumer_exe delayq_consumer
  PATHS "${build}" "${build}/Release" NO_DEFAULT_PATH REQUIRED)
step("run ${consumer_exe}" "${consumer_exe}")

# The README's program, run as the README says when no Redis is at hand: it
# prints what the README promises and exits by itself.
find_program(my_service my_service PATHS "${build}" "${build}/Release" NO_DEFAULT_PATH REQUIRED)
message(STATUS "consumer: run ${my_service} (the README's program)")
# A newcomer's first run starts from an empty store. A store left by an
# earlier run may hold an order-43 that run never reached: it runs at once
# and stops the program before this run's schedule completes.
set(db "${CONSUMER_WORK_DIR}/my_service.db")
file(REMOVE "${db}" "${db}-wal" "${db}-shm" "${db}-journal")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -E env "DELAYQ_STORE=sqlite:${db}"
          "${my_service}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
message(STATUS "consumer: my_service printed:\n${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "stored [^\n]+\norder.cancel order-43\n")
  message(FATAL_ERROR "consumer: the README's program exited ${rc} without printing "
    "\"stored ID\" then \"order.cancel order-43\"")
endif()
