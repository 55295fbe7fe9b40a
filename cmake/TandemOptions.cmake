include(GNUInstallDirs)

# Warnings-as-errors and sanitizer flags, applied to our own targets only
# (third-party headers come in as SYSTEM includes and are not judged).

function(tandem_target_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Werror -Wshadow -Wnon-virtual-dtor
      -Wno-error=deprecated-declarations>)
  # Installed, the engine's headers keep their paths under include/tandem and include each other as
  # "tandem/engine/..." (cmake/TandemInstallHeaders.cmake): the include directory alone finds them.
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  if(TANDEM_SANITIZE)
    # GCC's flow-based warnings misfire on sanitizer-instrumented code (GCC's manual says so
    # for -fsanitize); the release build keeps -Wmaybe-uninitialized as an error.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${TANDEM_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined
      -Wno-maybe-uninitialized>)
    target_link_options(${target} PRIVATE -fsanitize=${TANDEM_SANITIZE})
  endif()
  if(TANDEM_FUZZ)
    # Coverage for libFuzzer in every library the targets link; the targets add -fsanitize=fuzzer.
    # Sanitizers block some "#pragma omp simd" vectorisation, which clang reports (-Wpass-failed).
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link -Wno-unknown-warning-option -Wno-pass-failed)
  endif()
endfunction()

# A library target for one folder of the layout.
# LINKS: what the target's headers expose (PUBLIC); PRIVATE_LINKS: what only its sources use.
function(tandem_library target)
  cmake_parse_arguments(ARG "SHARED" "" "SOURCES;LINKS;PRIVATE_LINKS" ${ARGN})
  if(ARG_SHARED)
    add_library(${target} SHARED ${ARG_SOURCES})
    if(NOT TANDEM_FUZZ)
      # (clang links its sanitizer and fuzzer runtimes into executables only: a fuzz build's shared
      # libraries resolve those symbols from the executable at load time.)
      target_link_options(${target} PRIVATE -Wl,--no-undefined)
    endif()
  else()
    add_library(${target} STATIC ${ARG_SOURCES})
  endif()
  tandem_target_options(${target})
  if(ARG_LINKS)
    target_link_libraries(${target} PUBLIC ${ARG_LINKS})
  endif()
  if(ARG_PRIVATE_LINKS)
    target_link_libraries(${target} PRIVATE ${ARG_PRIVATE_LINKS})
  endif()
endfunction()

# A library made of every .cpp in the folder given (and its listed sub-folders), so adding a
# file needs no CMake edit. DIRS: sub-folders to include besides the folder itself.
function(tandem_folder_library target)
  cmake_parse_arguments(ARG "SHARED" "" "DIRS;LINKS;PRIVATE_LINKS" ${ARGN})
  set(patterns ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  foreach(dir ${ARG_DIRS})
    list(APPEND patterns ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.cpp)
  endforeach()
  file(GLOB sources CONFIGURE_DEPENDS ${patterns})
  if(NOT sources)
    # A folder with no code yet still is a target, so the folders above can name it.
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
      $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${target} INTERFACE ${ARG_LINKS})
    return()
  endif()
  if(ARG_SHARED)
    tandem_library(${target} SHARED SOURCES ${sources} LINKS ${ARG_LINKS} PRIVATE_LINKS ${ARG_PRIVATE_LINKS})
  else()
    tandem_library(${target} SOURCES ${sources} LINKS ${ARG_LINKS} PRIVATE_LINKS ${ARG_PRIVATE_LINKS})
  endif()
endfunction()
