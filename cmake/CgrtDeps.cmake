# cgrt_find_dep(NAME PKG <pkg-config name> HEADER <header> LIB <library> [HINTS dirs...] [REQUIRED])
#
# Finds a dependency through pkg-config, falling back to find_path/find_library, and defines the
# imported target cgrt::NAME. With REQUIRED, a missing dependency stops the configure step with
# the Debian package that provides it.
find_package(PkgConfig QUIET)

function(cgrt_find_dep name)
  cmake_parse_arguments(D "REQUIRED" "PKG;HEADER;LIB" "HINTS" ${ARGN})
  if(TARGET cgrt::${name})
    return()
  endif()
  if(PKG_CONFIG_FOUND AND D_PKG)
    pkg_check_modules(CGRT_PC_${name} QUIET IMPORTED_TARGET GLOBAL ${D_PKG})
    if(CGRT_PC_${name}_FOUND)
      add_library(cgrt::${name} ALIAS PkgConfig::CGRT_PC_${name})
      message(STATUS "cgrt: ${name} ${CGRT_PC_${name}_VERSION} (pkg-config)")
      return()
    endif()
  endif()
  find_path(CGRT_${name}_INCLUDE_DIR ${D_HEADER} HINTS ${D_HINTS} PATH_SUFFIXES include)
  find_library(CGRT_${name}_LIBRARY ${D_LIB} HINTS ${D_HINTS} PATH_SUFFIXES lib lib64)
  if(CGRT_${name}_INCLUDE_DIR AND CGRT_${name}_LIBRARY)
    add_library(cgrt::${name} INTERFACE IMPORTED GLOBAL)
    target_include_directories(cgrt::${name} INTERFACE ${CGRT_${name}_INCLUDE_DIR})
    target_link_libraries(cgrt::${name} INTERFACE ${CGRT_${name}_LIBRARY})
    message(STATUS "cgrt: ${name} ${CGRT_${name}_LIBRARY}")
  elseif(D_REQUIRED)
    message(FATAL_ERROR "cgrt: ${name} not found (header ${D_HEADER}, library ${D_LIB}). "
                        "On Debian: apt-get install lib${name}-dev")
  else()
    message(STATUS "cgrt: ${name} not found; features that need it are left out")
  endif()
endfunction()
