# Run after each build of a test executable (GTestSuites.cmake, Note [A process per suite]): lists its
# tests of each bucket and writes CTEST_FILE, one add_test() per GoogleTest suite and bucket.
#   cmake -D TEST_EXECUTABLE=... -D TEST_LABELS=l1|l2 -D TEST_FILTERS=f1|f2 -D TEST_TIMEOUT_SCALE=1
#         -D TEST_WORKING_DIR=... -D CTEST_FILE=... -P GTestSuitesAdd.cmake
cmake_minimum_required(VERSION 3.16)

string(REPLACE "|" ";" labels "${TEST_LABELS}")
string(REPLACE "|" ";" filters "${TEST_FILTERS}")
list(LENGTH labels buckets)
math(EXPR last "${buckets} - 1")

# Each bucket's suites (in GoogleTest's order) and their tests; how many buckets each suite is in.
foreach(b RANGE ${last})
  list(GET labels ${b} label)
  list(GET filters ${b} filter)
  execute_process(
    COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests "--gtest_filter=${filter}"
    WORKING_DIRECTORY "${TEST_WORKING_DIR}"
    TIMEOUT 120
    RESULT_VARIABLE result
    OUTPUT_VARIABLE output
    ERROR_VARIABLE errors)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "listing the tests of ${TEST_EXECUTABLE} failed (${result}):\n${output}${errors}")
  endif()
  # --gtest_list_tests prints "Suite." (with "  # TypeParam = ..." for typed suites), then each test
  # indented by two spaces ("  Name", "  Name/0  # GetParam() = ...").
  string(REPLACE ";" "\\;" output "${output}")
  string(REPLACE "\n" ";" lines "${output}")
  set(suites_${b} "")
  set(suite "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^  ([^ #]+)" AND NOT suite STREQUAL "")
      list(APPEND tests_${b}_${suite_id} "${suite}.${CMAKE_MATCH_1}")
    elseif(line MATCHES "^([^ #]+)\\.")
      set(suite "${CMAKE_MATCH_1}")
      string(MAKE_C_IDENTIFIER "${suite}" suite_id)
      list(APPEND suites_${b} "${suite}")
      set(tests_${b}_${suite_id} "")
      if(NOT DEFINED buckets_of_${suite_id})
        set(buckets_of_${suite_id} 0)
      endif()
      math(EXPR buckets_of_${suite_id} "${buckets_of_${suite_id}} + 1")
    endif()
  endforeach()
endforeach()

set(script "# Written by GTestSuitesAdd.cmake from ${TEST_EXECUTABLE} --gtest_list_tests\n")
foreach(b RANGE ${last})
  list(GET labels ${b} label)
  foreach(suite IN LISTS suites_${b})
    string(MAKE_C_IDENTIFIER "${suite}" suite_id)
    set(tests ${tests_${b}_${suite_id}})
    list(LENGTH tests count)
    if(count EQUAL 0)
      continue()
    endif()
    set(name "${suite}")
    if(buckets_of_${suite_id} GREATER 1)
      set(name "${suite} (${label})")
    endif()
    list(JOIN tests ":" filter)
    math(EXPR timeout "300 + 30 * (${count} - 1)")
    if(timeout GREATER 1800)
      set(timeout 1800)
    endif()
    math(EXPR timeout "${timeout} * ${TEST_TIMEOUT_SCALE}")
    string(APPEND script
           "add_test([==[${name}]==] [==[${TEST_EXECUTABLE}]==] [==[--gtest_filter=${filter}]==])\n"
           "set_tests_properties([==[${name}]==] PROPERTIES LABELS [==[${label}]==] TIMEOUT ${timeout}"
           " WORKING_DIRECTORY [==[${TEST_WORKING_DIR}]==] ENVIRONMENT OMP_NUM_THREADS=1)\n")
  endforeach()
endforeach()
file(WRITE "${CTEST_FILE}" "${script}")
