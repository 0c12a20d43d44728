# cgrt_add_backend(NAME SOURCES...)
#
# Builds a backend module the way a third party would: a MODULE library named
# libcgrt-backend-NAME.so that sees only the public headers, with hidden visibility so that it
# exports nothing but its `cgrt_backend_v1` table, placed where the loader searches by default.
function(cgrt_add_backend name)
  set(target cgrt-backend-${name})
  add_library(${target} MODULE ${ARGN})
  target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR}/core/include)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    C_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY ${CGRT_BACKEND_OUTPUT_DIR})
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
  install(TARGETS ${target} LIBRARY DESTINATION ${CGRT_BACKEND_INSTALL_DIR})
endfunction()
