# The installed exo (docs/embedding.md): `cmake --install` puts
#
#   bin/exo-node, exo-console, exo-cert, exo-model, exo-plan, exo-scenario,
#   exo-netem
#   include/exo/...                 the public headers (exo/exo.hpp for CAF
#                                   applications, exo/core.hpp CAF-free,
#                                   exo/version.hpp) and every header they
#                                   include, with exo's own includes
#                                   rewritten to <exo/...>; no other header
#   lib/libexo-core.{so,a}          the CAF-free layers (backends/, core/)
#   lib/libexo-runtime.{so,a}       messages/, actors/, runtime/ (the node)
#   lib/libexo-guard.a              the TLS guard and the sequence bound,
#                                   linked whole into each program
#   lib/cmake/exo/                  exoConfig.cmake, exoConfigVersion.cmake,
#                                   exoTargets.cmake, exo_imported_targets
#   lib/pkgconfig/exo.pc, exo-core.pc
#
# find_package(exo 0.1 REQUIRED) gives exo::runtime and exo::core (shared
# libraries) and exo::runtime_static and exo::core_static (archives);
# CAF, OpenSSL and the other dependencies are found by exoConfig.cmake.
#
# The package libraries are made of the objects of exo's internal static
# libraries (every object is position-independent, see CMakeLists.txt), so
# the build compiles nothing twice. Which internal libraries go in is not a
# list kept by hand: exo_package_closure() walks the link graph from the
# roots below, and a library's folder says which package library holds it.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EXO_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/exo)

# The internal libraries reachable from `roots` (output variable
# `out_internal`), and the external ones they link: `out_public` those
# linked PUBLIC or INTERFACE, `out_all` every one. The walk does not enter
# the internal libraries listed in EXO_PACKAGE_STOP (those of another
# package library, which brings its own dependencies).
function(exo_package_closure out_internal out_public out_all)
  set(seen ${EXO_PACKAGE_STOP})
  set(queue ${ARGN})
  set(pub)
  set(every)
  while(queue)
    list(POP_FRONT queue t)
    if(t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${t})
    get_target_property(type ${t} TYPE)
    set(links)
    set(ilinks)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(links ${t} LINK_LIBRARIES)
    endif()
    get_target_property(ilinks ${t} INTERFACE_LINK_LIBRARIES)
    foreach(kind links ilinks)
      foreach(l IN LISTS ${kind})
        if(NOT l OR l MATCHES "-NOTFOUND$")
          continue()
        endif()
        # A static library's PRIVATE dependencies show in its interface
        # as $<LINK_ONLY:...>: linked, never public.
        set(link_only FALSE)
        if(l MATCHES "^\\$<LINK_ONLY:(.*)>$")
          set(l ${CMAKE_MATCH_1})
          set(link_only TRUE)
        endif()
        if(l STREQUAL "exo_warnings")
          continue()
        endif()
        set(internal FALSE)
        if(TARGET ${l})
          get_target_property(imported ${l} IMPORTED)
          if(NOT imported)
            set(internal TRUE)
          endif()
        endif()
        if(internal)
          list(APPEND queue ${l})
        else()
          list(APPEND every ${l})
          if(kind STREQUAL "ilinks" AND NOT link_only)
            list(APPEND pub ${l})
          endif()
        endif()
      endforeach()
    endforeach()
  endwhile()
  list(REMOVE_DUPLICATES every)
  list(REMOVE_DUPLICATES pub)
  if(EXO_PACKAGE_STOP)
    list(REMOVE_ITEM seen ${EXO_PACKAGE_STOP})
  endif()
  set(${out_internal} ${seen} PARENT_SCOPE)
  set(${out_public} ${pub} PARENT_SCOPE)
  set(${out_all} ${every} PARENT_SCOPE)
endfunction()

# The roots: the node (exo_runtime) and the CAF-free libraries people use
# alone (GGUF reading, placement, tokenizers, chat templates, the model).
set(_roots exo_runtime exo_placement_model exo_tokenizer exo_chat exo_model
           exo_gguf exo_backends)
exo_package_closure(_internal _unused _unused2 ${_roots})

set(EXO_PACKAGE_CORE_LIBS)
set(EXO_PACKAGE_RUNTIME_LIBS)
foreach(t IN LISTS _internal)
  get_target_property(type ${t} TYPE)
  if(NOT type STREQUAL "STATIC_LIBRARY")
    continue()
  endif()
  get_target_property(dir ${t} SOURCE_DIR)
  file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${dir})
  if(rel MATCHES "^(backends|core)(/|$)")
    list(APPEND EXO_PACKAGE_CORE_LIBS ${t})
  else()
    list(APPEND EXO_PACKAGE_RUNTIME_LIBS ${t})
  endif()
endforeach()
list(SORT EXO_PACKAGE_CORE_LIBS)
list(SORT EXO_PACKAGE_RUNTIME_LIBS)
foreach(t IN LISTS EXO_PACKAGE_RUNTIME_LIBS)
  get_target_property(dir ${t} SOURCE_DIR)
  if(dir MATCHES "/runtime/gateway$")
    message(FATAL_ERROR "the installed runtime would hold ${t}")
  endif()
endforeach()

# The objects of a list of static libraries, and the external objects
# (hipcc's kernels) among their sources.
function(exo_package_objects out)
  set(objs)
  foreach(t IN LISTS ARGN)
    list(APPEND objs $<TARGET_OBJECTS:${t}>)
    get_target_property(srcs ${t} SOURCES)
    get_target_property(dir ${t} BINARY_DIR)
    foreach(s IN LISTS srcs)
      if(s MATCHES "\\.o$")
        if(NOT IS_ABSOLUTE ${s})
          set(s ${dir}/${s})
        endif()
        list(APPEND objs ${s})
      endif()
    endforeach()
  endforeach()
  set(${out} ${objs} PARENT_SCOPE)
endfunction()

# -- the public headers ------------------------------------------------------

configure_file(${CMAKE_SOURCE_DIR}/include/exo/version.hpp.in
               ${CMAKE_BINARY_DIR}/include/exo/version.hpp @ONLY)
file(GLOB_RECURSE _exo_headers CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/include/exo/*.hpp
     ${CMAKE_SOURCE_DIR}/backends/*.hpp ${CMAKE_SOURCE_DIR}/backends/*.h
     ${CMAKE_SOURCE_DIR}/core/*.hpp ${CMAKE_SOURCE_DIR}/messages/*.hpp
     ${CMAKE_SOURCE_DIR}/actors/*.hpp ${CMAKE_SOURCE_DIR}/runtime/*.hpp)
set(_exo_headers_stamp ${CMAKE_BINARY_DIR}/include/exo/.headers)
add_custom_command(
  OUTPUT ${_exo_headers_stamp}
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
          -DOUT_DIR=${CMAKE_BINARY_DIR}/include
          -DSTAMP=${_exo_headers_stamp}
          -P ${CMAKE_SOURCE_DIR}/cmake/exo_public_headers.cmake
  DEPENDS ${_exo_headers} ${CMAKE_SOURCE_DIR}/cmake/exo_public_headers.cmake
  COMMENT "exo's public headers (include/exo)"
  VERBATIM)
add_custom_target(exo_public_headers ALL DEPENDS ${_exo_headers_stamp})

# -- the package libraries ---------------------------------------------------

exo_package_closure(_c_int _c_pub _c_all ${EXO_PACKAGE_CORE_LIBS})
set(EXO_PACKAGE_STOP ${EXO_PACKAGE_CORE_LIBS})
exo_package_closure(_r_int _r_pub _r_all ${EXO_PACKAGE_RUNTIME_LIBS})
unset(EXO_PACKAGE_STOP)
exo_package_objects(_core_objs ${EXO_PACKAGE_CORE_LIBS})
exo_package_objects(_runtime_objs ${EXO_PACKAGE_RUNTIME_LIBS})

string(REGEX MATCH "^[0-9]+\\.[0-9]+" EXO_ABI_VERSION ${PROJECT_VERSION})
set(_incl $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/include>
          $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

foreach(kind shared static)
  string(TOUPPER ${kind} KIND)
  set(suffix "")
  if(kind STREQUAL "static")
    set(suffix "_static")
  endif()
  add_library(exo_package_core_${kind} ${KIND} ${_core_objs})
  add_library(exo_package_runtime_${kind} ${KIND} ${_runtime_objs})
  foreach(part core runtime)
    set(t exo_package_${part}_${kind})
    add_dependencies(${t} exo_public_headers)
    set_target_properties(${t} PROPERTIES
      OUTPUT_NAME exo-${part}
      EXPORT_NAME ${part}${suffix}
      LINKER_LANGUAGE CXX
      ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/package
      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/package
      INSTALL_RPATH_USE_LINK_PATH TRUE)
    target_include_directories(${t} INTERFACE ${_incl})
    if(EXO_SANITIZE) # the objects call the sanitizers' runtime
      target_link_options(${t} INTERFACE -fsanitize=address,undefined)
    endif()
    target_compile_features(${t} INTERFACE cxx_std_17)
  endforeach()
  target_link_libraries(exo_package_core_${kind}
    PUBLIC ${_c_pub} PRIVATE ${_c_all})
  # The guard first: its objects call into exo::core, which must come
  # after it on a static link line. (The export does not rename targets
  # inside $<LINK_LIBRARY:...>, hence the two forms.)
  target_link_libraries(exo_package_runtime_${kind} INTERFACE
    "$<BUILD_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,exo_package_guard>>"
    "$<INSTALL_INTERFACE:$<LINK_LIBRARY:WHOLE_ARCHIVE,exo::guard>>")
  target_link_libraries(exo_package_runtime_${kind}
    PUBLIC exo_package_core_${kind} ${_r_pub} PRIVATE ${_r_all})
endforeach()
foreach(part core runtime)
  set_target_properties(exo_package_${part}_shared PROPERTIES
    VERSION ${PROJECT_VERSION} SOVERSION ${EXO_ABI_VERSION})
endforeach()
# The runtime's shared library calls the guard's functions (the node sets
# the TLS limits): they stay undefined in it and bind to the program's.

# The TLS guard (core/tls/ssl_error_queue_guard.cpp) and the sequence bound
# (messages/sequence_bound.cpp) take the place of libssl's and libcaf's
# functions only from inside the program: exo::runtime links this archive
# whole into every program that uses it.
add_library(exo_package_guard STATIC
  $<TARGET_OBJECTS:exo_ssl_guard> $<TARGET_OBJECTS:exo_sequence_bound>)
set_target_properties(exo_package_guard PROPERTIES
  OUTPUT_NAME exo-guard EXPORT_NAME guard LINKER_LANGUAGE CXX
  ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/package)
target_link_libraries(exo_package_guard INTERFACE OpenSSL::SSL
                      ${CMAKE_DL_LIBS} Threads::Threads)

add_custom_target(exo_package ALL DEPENDS
  exo_package_core_shared exo_package_runtime_shared
  exo_package_core_static exo_package_runtime_static exo_package_guard)

# -- install -----------------------------------------------------------------

install(TARGETS exo-node exo-console exo-cert exo-model exo-plan exo-scenario
        exo-netem
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(TARGETS exo_package_core_shared exo_package_runtime_shared
                exo_package_core_static exo_package_runtime_static
                exo_package_guard
        EXPORT exoTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${CMAKE_BINARY_DIR}/include/exo
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        PATTERN ".headers" EXCLUDE)
install(EXPORT exoTargets NAMESPACE exo:: DESTINATION ${EXO_INSTALL_CMAKEDIR})

# exoConfig.cmake finds what the targets link: the imported targets the
# build used, by the same means.
set(EXO_PACKAGE_DEPENDENCIES ${_c_all} ${_r_all})
list(REMOVE_DUPLICATES EXO_PACKAGE_DEPENDENCIES)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/exoConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/exoConfig.cmake
  INSTALL_DESTINATION ${EXO_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API (docs/embedding.md, versioning).
write_basic_package_version_file(
  ${CMAKE_BINARY_DIR}/package/exoConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/exoConfig.cmake
              ${CMAKE_BINARY_DIR}/package/exoConfigVersion.cmake
              ${CMAKE_SOURCE_DIR}/cmake/exo_imported_targets.cmake
        DESTINATION ${EXO_INSTALL_CMAKEDIR})

# pkg-config: the shared libraries (Libs) and, for --static, what the
# archives need (Libs.private), from the same link lists.
function(exo_pkgconfig_flags out)
  set(flags)
  set(queue ${ARGN})
  set(seen)
  while(queue)
    list(POP_FRONT queue l)
    if(l IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${l})
    if(TARGET ${l})
      get_target_property(type ${l} TYPE)
      if(NOT type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(loc ${l} IMPORTED_LOCATION)
        get_target_property(configs ${l} IMPORTED_CONFIGURATIONS)
        foreach(c IN LISTS configs)
          if(NOT loc)
            get_target_property(loc ${l} IMPORTED_LOCATION_${c})
          endif()
        endforeach()
        if(loc)
          list(APPEND flags ${loc})
        endif()
      endif()
      get_target_property(sub ${l} INTERFACE_LINK_LIBRARIES)
      if(sub)
        list(APPEND queue ${sub})
      endif()
    elseif(l MATCHES "^-")
      list(APPEND flags ${l})
    elseif(IS_ABSOLUTE ${l})
      list(APPEND flags ${l})
    elseif(l MATCHES "^\\$<")
      # generator expressions (link-only wrappers were taken off above)
    else()
      list(APPEND flags -l${l})
    endif()
  endwhile()
  list(REMOVE_DUPLICATES flags)
  string(JOIN " " flags ${flags})
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()
exo_pkgconfig_flags(EXO_PC_CORE_PRIVATE ${_c_all})
exo_pkgconfig_flags(EXO_PC_RUNTIME_PRIVATE ${_r_all})
exo_pkgconfig_flags(EXO_PC_RUNTIME_PUBLIC CAF::openssl)
set(EXO_PC_SANITIZE "")
if(EXO_SANITIZE)
  set(EXO_PC_SANITIZE "-fsanitize=address,undefined")
endif()
# Relocatable: the prefix is found from the .pc file's own folder.
file(RELATIVE_PATH EXO_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" EXO_PC_TO_PREFIX "${EXO_PC_TO_PREFIX}")
foreach(pc exo exo-core)
  configure_file(${CMAKE_SOURCE_DIR}/cmake/${pc}.pc.in
                 ${CMAKE_BINARY_DIR}/package/${pc}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/package/${pc}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
