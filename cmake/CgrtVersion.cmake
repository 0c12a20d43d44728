# The version numbers the installed files carry, read from the public headers, which are their one
# source (a backend reads them there at compile time):
#
#   CGRT_HOST_API_MINOR     backend.h's CGRT_HOST_API_MINOR: what a backend may use of the host API
#   CGRT_BACKEND_ABI_MAJOR  backend.h's CGRT_BACKEND_ABI_MAJOR
#
# and cgrt.h's CGRT_VERSION_STRING and python/cgrt/__init__.py's __version__ checked against
# project(): a release that bumps one and not the others stops here. The CMake package (cgrtConfig.cmake), cgrt.pc and cgrt-backend.pc carry them.
set(cgrt_include_dir ${CMAKE_SOURCE_DIR}/core/include/cgrt)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${cgrt_include_dir}/cgrt.h
                                                               ${cgrt_include_dir}/backend.h)

# The number a `#define NAME N` of `header` gives, into `out`.
function(cgrt_header_define header name out)
  file(STRINGS ${header} lines REGEX "^#define ${name} +[0-9\"]")
  list(LENGTH lines n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "cgrt: ${header} should define ${name} once (found ${n} times)")
  endif()
  string(REGEX REPLACE "^#define ${name} +\"?([^\" ]+)\"?.*$" "\\1" value "${lines}")
  set(${out} ${value} PARENT_SCOPE)
endfunction()

cgrt_header_define(${cgrt_include_dir}/backend.h CGRT_HOST_API_MINOR CGRT_HOST_API_MINOR)
cgrt_header_define(${cgrt_include_dir}/backend.h CGRT_BACKEND_ABI_MAJOR CGRT_BACKEND_ABI_MAJOR)
cgrt_header_define(${cgrt_include_dir}/cgrt.h CGRT_VERSION_STRING cgrt_header_version)
if(NOT cgrt_header_version STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "cgrt: cgrt.h says CGRT_VERSION_STRING \"${cgrt_header_version}\" but "
                      "CMakeLists.txt's project() says ${PROJECT_VERSION}: change both (and "
                      "CGRT_VERSION_MAJOR/MINOR/PATCH, python/cgrt/__init__.py's __version__, the "
                      "README's table of releases)")
endif()
# The Python package's version is the library's (pyproject.toml takes it from __version__).
set(cgrt_python_init ${CMAKE_SOURCE_DIR}/python/cgrt/__init__.py)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${cgrt_python_init})
file(STRINGS ${cgrt_python_init} cgrt_python_version REGEX "^__version__ = ")
string(REGEX REPLACE "^__version__ = \"([^\"]*)\".*$" "\\1" cgrt_python_version
                     "${cgrt_python_version}")
if(NOT cgrt_python_version STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "cgrt: python/cgrt/__init__.py says __version__ = \"${cgrt_python_version}\" "
                      "but the library is ${PROJECT_VERSION}: the package's version is the library's")
endif()
message(STATUS "cgrt: ${PROJECT_VERSION}, backend ABI ${CGRT_BACKEND_ABI_MAJOR}, "
               "host API minor ${CGRT_HOST_API_MINOR}")
