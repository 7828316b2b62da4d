# Test helpers: one Catch2 main compiled once, and exo_add_test() to declare a
# test executable with CTest labels.
find_package(Catch2 2 REQUIRED)
include(Catch)

add_library(exo_catch_main STATIC ${CMAKE_SOURCE_DIR}/test/catch_main.cpp)

# Test-only npm tools (scripts/test-tools.sh installs them; `make test` runs
# it first). A test that needs one and finds it missing exits with 77,
# which CTest reports as skipped ("Not Run"), never as passed.
if(DEFINED ENV{EXO_TEST_TOOLS})
  set(EXO_TEST_TOOLS_DEFAULT "$ENV{EXO_TEST_TOOLS}")
elseif(DEFINED ENV{XDG_CACHE_HOME})
  set(EXO_TEST_TOOLS_DEFAULT "$ENV{XDG_CACHE_HOME}/exo-test-tools")
else()
  set(EXO_TEST_TOOLS_DEFAULT "$ENV{HOME}/.cache/exo-test-tools")
endif()
set(EXO_TEST_TOOLS "${EXO_TEST_TOOLS_DEFAULT}" CACHE PATH
    "Folder of the test-only npm tools (scripts/test-tools.sh)")
set(EXO_TEST_SKIP_CODE 77)
target_link_libraries(exo_catch_main PUBLIC Catch2::Catch2)

# exo_add_test(NAME name SOURCES a.cpp b.cpp LIBS lib... LABELS unit ...
#              [TIMEOUT seconds] [FIXTURES fixture...])
# Each Catch2 TEST_CASE becomes its own CTest test carrying LABELS (and
# requiring the CTest FIXTURES).
function(exo_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;FIXTURES"
                        ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE exo_catch_main ${T_LIBS} exo_warnings)
  # --warn NoTests: a ctest whose name matches no test case fails instead of
  # passing with nothing run (a ';' in a test case's name split it into two
  # such ctests: 19 test cases never ran).
  catch_discover_tests(${T_NAME}
    TEST_PREFIX "${T_NAME}: "
    EXTRA_ARGS --warn NoTests
    PROPERTIES TIMEOUT ${T_TIMEOUT}
               SKIP_RETURN_CODE ${EXO_TEST_SKIP_CODE}
    TEST_LIST ${T_NAME}_TESTS)
  # Labels are set by a script CTest runs after Catch's list of tests:
  # through catch_discover_tests' PROPERTIES a list of labels loses its
  # separators, so "slow" became a property name and TIMEOUT was dropped.
  # Under the sanitizers the tests (and the exo-node processes they start)
  # also get UBSan's suppressions of CAF's own header code (cmake/ubsan.supp).
  # The environment goes the same way (a list of variables).
  set(env "XDG_RUNTIME_DIR=/tmp;EXO_TEST_TOOLS=${EXO_TEST_TOOLS}")
  if(EXO_SANITIZE)
    set(env "${env};UBSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/cmake/ubsan.supp:print_stacktrace=1")
  endif()
  set(extra " ENVIRONMENT \"${env}\"")
  if(T_FIXTURES)
    set(extra "${extra} FIXTURES_REQUIRED \"${T_FIXTURES}\"")
  endif()
  set(labels_file "${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}_labels.cmake")
  file(WRITE "${labels_file}"
    "foreach(t IN LISTS ${T_NAME}_TESTS)\n"
    "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${T_LABELS}\"${extra})\n"
    "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
endfunction()

# exo_add_script_test(NAME name COMMAND cmd... LABELS l... [TIMEOUT s]):
# a test that is a script (bash, node), with the same environment and skip
# convention (exit 77 = skipped) as exo_add_test's.
function(exo_add_script_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  set(env "XDG_RUNTIME_DIR=/tmp;EXO_TEST_TOOLS=${EXO_TEST_TOOLS};EXO_TEST_BUILD_DIR=${CMAKE_BINARY_DIR};EXO_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}"
    TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE ${EXO_TEST_SKIP_CODE}
    ENVIRONMENT "${env}")
endfunction()
