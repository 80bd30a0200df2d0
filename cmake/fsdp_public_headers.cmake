# Writes the installable copy of the public headers (cmake -P script, run at build time).
#   -DSRC_DIR=<repo>/src  -DOUT_DIR=<build>/include  -DHEADERS=a.h,b/c.h  (paths relative to src/)
# In the source tree headers include each other as "nn/param.h" (src/ is on the include path); the
# installed copies live under <prefix>/include/fsdp/ and include each other as <fsdp/nn/param.h>, so
# that `#include <fsdp/fsdp.h>` with only -I<prefix>/include compiles. src/fsdp/fsdp.h becomes
# fsdp/fsdp.h; every other src/X becomes fsdp/X. A public header that includes a header outside the
# list stops the build: that header would be missing from the installed tree.
string(REPLACE "," ";" headers "${HEADERS}")

function(fsdp_installed_name src_rel out)
  if(src_rel STREQUAL "fsdp/fsdp.h")
    set(${out} "fsdp/fsdp.h" PARENT_SCOPE)
  else()
    set(${out} "fsdp/${src_rel}" PARENT_SCOPE)
  endif()
endfunction()

foreach(h ${headers})
  file(READ "${SRC_DIR}/${h}" text)
  string(REGEX MATCHALL "#include \"[^\"]+\"" includes "${text}")
  foreach(inc ${includes})
    string(REGEX REPLACE "#include \"([^\"]+)\"" "\\1" dep "${inc}")
    list(FIND headers "${dep}" found)
    if(found EQUAL -1)
      message(FATAL_ERROR "public header src/${h} includes \"${dep}\", which is not public: add it to "
                          "FSDP_PUBLIC_HEADERS in cmake/fsdp_install.cmake or drop the include")
    endif()
    fsdp_installed_name("${dep}" dep_installed)
    string(REPLACE "${inc}" "#include <${dep_installed}>" text "${text}")
  endforeach()
  fsdp_installed_name("${h}" installed)
  set(out "${OUT_DIR}/${installed}")
  # rewrite only when the content changed, so dependents do not rebuild for nothing
  set(old "")
  if(EXISTS "${out}")
    file(READ "${out}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${out}" "${text}")
  endif()
endforeach()
