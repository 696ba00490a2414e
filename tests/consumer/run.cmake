# cmake -P script behind the consumer CTest test. Inputs (all -D):
#   DELAYQ_BUILD_DIR      the delayq build tree to install (already built)
#   DELAYQ_CONFIG         its configuration ($<CONFIG>; may be empty)
#   CONSUMER_SOURCE_DIR   tests/consumer
#   CONSUMER_WORK_DIR     scratch space: <work>/prefix and <work>/build
#   CONSUMER_GENERATOR    generator for the consumer build
#   CONSUMER_CXX_COMPILER compiler for the consumer build
cmake_minimum_required(VERSION 3.21)

foreach(var DELAYQ_BUILD_DIR CONSUMER_SOURCE_DIR CONSUMER_WORK_DIR CONSUMER_GENERATOR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${CONSUMER_WORK_DIR}/prefix")
set(build "${CONSUMER_WORK_DIR}/build")
# Start clean so a stale install or cache cannot make the test pass.
file(REMOVE_RECURSE "${prefix}" "${build}")

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
step("configure ${CONSUMER_SOURCE_DIR}"
  "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${build}"
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
