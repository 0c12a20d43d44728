# cgrt_add_backend(NAME [INSTALL_DIR dir | NO_INSTALL] SOURCES...)
#
# Builds a cgrt backend: a MODULE library named libcgrt-backend-NAME.so that sees only the public
# headers (cgrt::headers), built with hidden visibility so that it exports nothing but its
# `cgrt_backend_v1` table, linked with --no-undefined (a backend calls nothing of libcgrt: the
# core lends it everything through the host API table).
#
# `cmake --install` puts it, by the first of these that is given:
#   INSTALL_DIR dir                  into dir (relative: under CMAKE_INSTALL_PREFIX);
#   NO_INSTALL                       nowhere: install it yourself;
#   -DCGRT_BACKEND_INSTALL_DIR=dir   (a cache variable, for whoever builds) into dir, relative
#                                    under CMAKE_INSTALL_PREFIX: a distribution packaging a
#                                    backend for its own cgrt package gives lib/cgrt/backends;
#   CGRT_BACKEND_DIR                 the default: the backend folder of the cgrt that
#                                    find_package(cgrt) found (an absolute path), where that cgrt's
#                                    loader searches, so `impl = NAME` finds it with no
#                                    backend_path. `--prefix` does not move it there; DESTDIR does.
# Without the package (cgrt's own build): LIBDIR/cgrt/backends under CMAKE_INSTALL_PREFIX.
#
# The built-in backends use this function, and the installed CMake package (find_package(cgrt))
# provides the same one to third parties. Set CGRT_BACKEND_OUTPUT_DIR to choose where the module
# is written in the build tree.
if(NOT DEFINED CGRT_BACKEND_INSTALL_DIR) # cgrt's own build sets it (lib/cgrt/backends)
  set(CGRT_BACKEND_INSTALL_DIR "" CACHE STRING
      "Where cgrt_add_backend installs backends (relative: under CMAKE_INSTALL_PREFIX); empty: \
the backend folder of the cgrt found (CGRT_BACKEND_DIR)")
endif()

function(cgrt_add_backend name)
  cmake_parse_arguments(B "NO_INSTALL" "INSTALL_DIR" "" ${ARGN})
  set(target cgrt-backend-${name})
  add_library(${target} MODULE ${B_UNPARSED_ARGUMENTS})
  target_link_libraries(${target} PRIVATE cgrt::headers)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "cgrt-backend-${name}"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden)
  if(CGRT_BACKEND_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CGRT_BACKEND_OUTPUT_DIR})
  endif()
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
  if(B_NO_INSTALL)
    return()
  endif()
  if(B_INSTALL_DIR)
    set(dir ${B_INSTALL_DIR})
  elseif(CGRT_BACKEND_INSTALL_DIR)
    set(dir ${CGRT_BACKEND_INSTALL_DIR})
  elseif(CGRT_BACKEND_DIR)
    set(dir ${CGRT_BACKEND_DIR})
  else()
    include(GNUInstallDirs)
    set(dir ${CMAKE_INSTALL_LIBDIR}/cgrt/backends)
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION ${dir})
  # Where it goes, for whoever checks (tests/sdk reads it from the install, not from here).
  set_target_properties(${target} PROPERTIES CGRT_INSTALL_DIR ${dir})
  if(CGRT_BACKEND_DIR AND NOT B_INSTALL_DIR AND NOT CGRT_BACKEND_INSTALL_DIR)
    message(STATUS "cgrt: backend ${name} installs into ${dir} (cgrt's own backend folder)")
  endif()
endfunction()
