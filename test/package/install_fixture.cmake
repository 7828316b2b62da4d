# cmake -DBUILD_DIR=... -DPREFIX=... -P install_fixture.cmake
# A fresh install of the build tree into PREFIX (what remained of an
# earlier one is removed first).
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR}
                        --prefix ${PREFIX}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}):\n${out}\n${err}")
endif()
message(STATUS "installed into ${PREFIX}")
