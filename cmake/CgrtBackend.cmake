# cgrt_add_backend(NAME SOURCES...)
#
# Builds a cgrt backend: a MODULE library named libcgrt-backend-NAME.so that sees only the public
# headers (cgrt::headers), built with hidden visibility so that it exports nothing but its
# `cgrt_backend_v1` table, linked with --no-undefined (a backend calls nothing of libcgrt: the
# core lends it everything through the host API table), and installed into
# LIBDIR/cgrt/backends, where the loader searches by default.
#
# The built-in backends use this function, and the installed CMake package (find_package(cgrt))
# provides the same one to third parties. Set CGRT_BACKEND_OUTPUT_DIR to choose where the module
# is written in the build tree.
function(cgrt_add_backend name)
  set(target cgrt-backend-${name})
  add_library(${target} MODULE ${ARGN})
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
  if(NOT CGRT_BACKEND_INSTALL_DIR)
    include(GNUInstallDirs)
    set(CGRT_BACKEND_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cgrt/backends)
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION ${CGRT_BACKEND_INSTALL_DIR})
endfunction()
