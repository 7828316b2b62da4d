# Imported targets for the Debian libraries that ship no CMake package:
# CAF 0.17 (no package, no pkg-config file) and Gecode (libraries named
# gecodeXXX). Used by exo's own build
# (ExoDependencies.cmake) and installed beside exoConfig.cmake, so that an
# application using find_package(exo) gets the same targets.
find_package(Threads REQUIRED)

if(NOT TARGET CAF::core)
  find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
  find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
  find_library(CAF_IO_LIBRARY caf_io REQUIRED)
  find_library(CAF_OPENSSL_LIBRARY caf_openssl REQUIRED)
  add_library(CAF::core UNKNOWN IMPORTED)
  set_target_properties(CAF::core PROPERTIES
    IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR}
    INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(CAF::io UNKNOWN IMPORTED)
  set_target_properties(CAF::io PROPERTIES
    IMPORTED_LOCATION ${CAF_IO_LIBRARY}
    INTERFACE_LINK_LIBRARIES CAF::core)
  add_library(CAF::openssl UNKNOWN IMPORTED)
  set_target_properties(CAF::openssl PROPERTIES
    IMPORTED_LOCATION ${CAF_OPENSSL_LIBRARY}
    INTERFACE_LINK_LIBRARIES "CAF::io;OpenSSL::SSL;OpenSSL::Crypto")
endif()

if(NOT TARGET Gecode::gecode)
  find_path(GECODE_INCLUDE_DIR gecode/int.hh REQUIRED)
  set(_exo_gecode_libs)
  foreach(part driver flatzinc minimodel search int set float kernel support)
    find_library(GECODE_${part}_LIBRARY gecode${part} REQUIRED)
    list(APPEND _exo_gecode_libs ${GECODE_${part}_LIBRARY})
  endforeach()
  add_library(Gecode::gecode INTERFACE IMPORTED)
  set_target_properties(Gecode::gecode PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${GECODE_INCLUDE_DIR}
    INTERFACE_LINK_LIBRARIES "${_exo_gecode_libs};Threads::Threads")
  unset(_exo_gecode_libs)
endif()

