# cmake -DREADME=README.md -DOUT=dir -DVERSION=x.y.z -P guides.cmake
#
# Writes the installed guides (share/doc/cgrt) from the README, their one source: OUT/backend-guide.md
# (the README's sections for backend writers) and OUT/host-guide.md (those for hosts and operators).
# A section is a `## TITLE` line and everything up to the next `## ` line. A title listed here that
# the README lacks stops the build, naming it: rename it here with the README.
set(backend_sections "The backend ABI (v1)" "Writing a backend")
set(host_sections "Using cgrt from a host" "C++" "Porting a C trainer" "PyTorch"
                  "Configuration reference" "Backends" "Graph memory" "Reliability and safety"
                  "The `cgrt` command" "Device drivers")

file(READ ${README} readme)
set(readme "\n${readme}")

# The text of section `title` of the README, into `out`.
function(readme_section title out)
  string(FIND "${readme}" "\n## ${title}\n" start)
  if(start EQUAL -1)
    message(FATAL_ERROR "guides.cmake: ${README} has no section '## ${title}': the installed guides "
                        "take it; rename it in cmake/guides.cmake too")
  endif()
  math(EXPR start "${start} + 1")
  string(SUBSTRING "${readme}" ${start} -1 rest)
  string(LENGTH "## ${title}\n" skip)
  string(SUBSTRING "${rest}" ${skip} -1 after)
  string(FIND "${after}" "\n## " end)
  if(end EQUAL -1)
    set(${out} "${rest}" PARENT_SCOPE)
  else()
    math(EXPR end "${end} + ${skip} + 1")
    string(SUBSTRING "${rest}" 0 ${end} text)
    set(${out} "${text}" PARENT_SCOPE)
  endif()
endfunction()

function(write_guide file heading intro)
  set(text "<!-- Written from cgrt's README.md by cmake/guides.cmake: edit the README. -->\n")
  string(APPEND text "# ${heading} (cgrt ${VERSION})\n\n${intro}\n\n")
  foreach(title ${ARGN})
    readme_section("${title}" section)
    string(APPEND text "${section}")
  endforeach()
  file(WRITE ${OUT}/${file} "${text}")
endfunction()

set(where "The sections of cgrt's README. Paths such as `tests/...`, `plugins/...` or `backends/...` \
are those of cgrt's source repository; the installed headers are in `include/cgrt`, the CMake \
package in `lib/cmake/cgrt`, the pkg-config files in `lib/pkgconfig`.")
write_guide(backend-guide.md "Writing a cgrt backend"
  "${where} For the configuration keys of the core and the built-in backends, see host-guide.md \
beside this file; for the design, DESIGN.md." ${backend_sections})
write_guide(host-guide.md "Using cgrt from a host"
  "${where} For writing a backend, see backend-guide.md beside this file; for the design, \
DESIGN.md; for a complete small host, examples/toy_host." ${host_sections})
