# cmake -DSOURCE_DIR=... -DOUT_DIR=... -DSTAMP=... -P exo_public_headers.cmake
#
# Writes exo's public headers to OUT_DIR/exo/: the headers of include/exo/
# (the API) and every exo header they include, directly or not, each at
# its path in the tree (core/gguf/gguf.hpp -> exo/core/gguf/gguf.hpp), with
# exo's own includes rewritten from "core/..." to <exo/core/...>. No other
# header of the tree is public. A file is rewritten only when its content
# changes (no needless rebuilds); headers no longer public are removed.
# The list of written headers goes to STAMP.

cmake_policy(VERSION 3.25)
set(layers "backends|core|messages|actors|runtime")
file(GLOB roots RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/include/exo/*.hpp)
set(queue ${roots})
set(done)
set(written)
while(queue)
  list(POP_FRONT queue rel)
  if(rel IN_LIST done)
    continue()
  endif()
  list(APPEND done ${rel})
  file(READ ${SOURCE_DIR}/${rel} text)
  # Every quoted include of an exo header: follow it.
  string(REGEX MATCHALL "#include \"[^\"]+\"" incs "${text}")
  foreach(inc IN LISTS incs)
    string(REGEX REPLACE "#include \"([^\"]+)\"" "\\1" path "${inc}")
    if(path MATCHES "^(${layers})/")
      if(NOT EXISTS ${SOURCE_DIR}/${path})
        message(FATAL_ERROR "${rel} includes ${path}, which does not exist")
      endif()
      list(APPEND queue ${path})
    elseif(path MATCHES "^exo/")
      if(EXISTS ${SOURCE_DIR}/include/${path})
        list(APPEND queue include/${path})
      elseif(NOT EXISTS ${OUT_DIR}/${path}) # generated: exo/version.hpp
        message(FATAL_ERROR "${rel} includes ${path}, which does not exist")
      endif()
    else()
      message(FATAL_ERROR "${rel}: a public header includes \"${path}\": "
                          "include exo's headers by their path in the tree")
    endif()
  endforeach()
  string(REGEX REPLACE "#include \"((${layers})/[^\"]+)\"" "#include <exo/\\1>"
         text "${text}")
  string(REGEX REPLACE "#include \"(exo/[^\"]+)\"" "#include <\\1>"
         text "${text}")
  if(rel MATCHES "^include/(.*)$")
    set(dest ${CMAKE_MATCH_1})
  else()
    set(dest exo/${rel})
  endif()
  set(old "")
  if(EXISTS ${OUT_DIR}/${dest})
    file(READ ${OUT_DIR}/${dest} old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE ${OUT_DIR}/${dest} "${text}")
  endif()
  list(APPEND written ${dest})
endwhile()

# Headers that were public once and are not any more.
file(GLOB_RECURSE present RELATIVE ${OUT_DIR} ${OUT_DIR}/exo/*)
foreach(f IN LISTS present)
  if(NOT f IN_LIST written AND NOT f STREQUAL "exo/version.hpp"
     AND NOT f STREQUAL "exo/.headers")
    file(REMOVE ${OUT_DIR}/${f})
  endif()
endforeach()
list(APPEND written exo/version.hpp)
list(SORT written)
string(JOIN "\n" listing ${written})
file(WRITE ${STAMP} "${listing}\n")
