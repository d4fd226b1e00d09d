# dtrain_discover_test_suites (below) registers a test executable's GoogleTest tests with CTest a suite
# at a time: a CTest test named after the suite ("FlightRecorder", "Gloo/CommunicatorConformance")
# runs that suite's tests of one label in one process. Like gtest_discover_tests, the tests are
# listed after each build of the executable (GTestSuitesAdd.cmake), so a new test needs no CMake edit.
#
# Note [A process per suite]
# gtest_discover_tests gives every test a process of its own, and a process that links LibTorch
# takes 0.7-1 s on two cores to start (its operator registry) before a test runs: with 849 tests so
# registered, the whole suite took 1,550-1,615 s, over the 20 minutes CI allows its tests. Tests of
# one suite and label run in one process instead (GoogleTest's own default): 163 processes, and the
# same suite took 1,133 s on the same host. What is kept: `ctest -L` and `ctest
# -R Suite` select as before; a failure's output names the test (GoogleTest prints it), and the
# suite's other tests still run after one fails. Tests labelled *-slow keep a process each (their
# start is noise beside them, and their TIMEOUT stays one test's). TIMEOUT: 300 s for the first
# test of a suite, 30 s for each further one, at most 1,800 s; four times that under sanitizers
# (DTRAIN_SANITIZE), which run the tests several times slower.
set(_dtrain_gtest_suites_script ${CMAKE_CURRENT_LIST_DIR}/GTestSuitesAdd.cmake)

# dtrain_discover_test_suites(target BUCKETS "label=filter" ...): each bucket's tests, the tests of
# TARGET matching its gtest filter, as a CTest test per suite labelled `label`. A suite with tests in
# several buckets gets a test per bucket, named "Suite (label)".
function(dtrain_discover_test_suites target)
  cmake_parse_arguments(A "" "" "BUCKETS" ${ARGN})
  set(labels "")
  set(filters "")
  foreach(bucket IN LISTS A_BUCKETS)
    string(FIND "${bucket}" "=" eq)
    string(SUBSTRING "${bucket}" 0 ${eq} label)
    math(EXPR from "${eq} + 1")
    string(SUBSTRING "${bucket}" ${from} -1 filter)
    list(APPEND labels "${label}")
    list(APPEND filters "${filter}")
  endforeach()
  # Passed joined by '|', which neither labels nor gtest filters contain.
  list(JOIN labels "|" labels)
  list(JOIN filters "|" filters)
  set(scale 1)
  if(DTRAIN_SANITIZE)
    set(scale 4)
  endif()
  set(base "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites")
  set(include_file "${base}_include.cmake")
  set(tests_file "${base}_tests.cmake")
  add_custom_command(
    TARGET ${target} POST_BUILD
    BYPRODUCTS "${tests_file}"
    COMMAND "${CMAKE_COMMAND}" -D "TEST_EXECUTABLE=$<TARGET_FILE:${target}>" -D "TEST_LABELS=${labels}"
            -D "TEST_FILTERS=${filters}" -D "TEST_TIMEOUT_SCALE=${scale}"
            -D "TEST_WORKING_DIR=${CMAKE_CURRENT_BINARY_DIR}"
            -D "CTEST_FILE=${tests_file}" -P "${_dtrain_gtest_suites_script}"
    VERBATIM)
  file(WRITE "${include_file}"
       "if(EXISTS \"${tests_file}\")\n  include(\"${tests_file}\")\nelse()\n"
       "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
