# Run by `cmake --install` (cmake/TandemInstall.cmake): installs the public headers under
# <includedir>/tandem, each at its path in the source tree (include/tandem/*.h at the top), with its
# project #include lines ("engine/...", "data/...", "models/...") rewritten to "tandem/engine/...".
# The prefix's include directory alone then finds every header, which is all that pkg-config and
# Tandem::tandem put on the include path, and a program's own engine/ or data/ folder cannot shadow
# one. Rewritten here, at install time, so the installed copies always match the sources.
#   In: TANDEM_SOURCE_DIR; TANDEM_HEADERS (relative to it, or absolute: a generated header, which goes
#   to the top); TANDEM_INCLUDE_DESTINATION (include/tandem, relative to the prefix or absolute).
if(IS_ABSOLUTE "${TANDEM_INCLUDE_DESTINATION}")
  set(_tandem_root "$ENV{DESTDIR}${TANDEM_INCLUDE_DESTINATION}")
else()
  set(_tandem_root "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/${TANDEM_INCLUDE_DESTINATION}")
endif()
foreach(_tandem_header IN LISTS TANDEM_HEADERS)
  if(IS_ABSOLUTE "${_tandem_header}")
    set(_tandem_from "${_tandem_header}")
    get_filename_component(_tandem_to "${_tandem_header}" NAME)
  else()
    set(_tandem_from "${TANDEM_SOURCE_DIR}/${_tandem_header}")
    string(REGEX REPLACE "^include/tandem/" "" _tandem_to "${_tandem_header}")
  endif()
  set(_tandem_to "${_tandem_root}/${_tandem_to}")
  file(READ "${_tandem_from}" _tandem_text)
  # A newline in front, so that every #include line, the first one too, follows one.
  string(REGEX REPLACE "\n#include \"(engine|data|models)/" "\n#include \"tandem/\\1/" _tandem_text "\n${_tandem_text}")
  string(SUBSTRING "${_tandem_text}" 1 -1 _tandem_text)
  set(_tandem_old "")
  if(EXISTS "${_tandem_to}")
    file(READ "${_tandem_to}" _tandem_old)
  endif()
  if(_tandem_old STREQUAL _tandem_text)
    message(STATUS "Up-to-date: ${_tandem_to}")
  else()
    message(STATUS "Installing: ${_tandem_to}")
    file(WRITE "${_tandem_to}" "${_tandem_text}")
  endif()
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_tandem_to}")
endforeach()
