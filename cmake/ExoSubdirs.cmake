# exo_add_subdirectories(a b c): add each listed sub-folder that exists and has
# a CMakeLists.txt. Lets components land independently.
macro(exo_add_subdirectories)
  foreach(_d ${ARGN})
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_d}/CMakeLists.txt)
      add_subdirectory(${_d})
    endif()
  endforeach()
endmacro()
