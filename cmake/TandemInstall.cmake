# The installed package: `cmake --install build --prefix P` puts the public headers under
# P/include/tandem, the libraries (and the CUDA plugin, beside libtandem_core.so where the plugin
# loader looks) under P/lib, and a CMake package (find_package(Tandem), Tandem::tandem) and a
# pkg-config file. docs/EMBEDDING.md shows a program built against it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TANDEM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
configure_file(${PROJECT_SOURCE_DIR}/include/tandem/version.h.in ${PROJECT_BINARY_DIR}/include/tandem/version.h @ONLY)

# Tandem::tandem: every library a program needs, and the headers' root: <tandem/...> (in the build
# tree the source root too, for the engine's own "engine/...", "data/...", "models/..." paths; the
# installed headers include those as "tandem/engine/...": cmake/TandemInstallHeaders.cmake).
add_library(tandem INTERFACE)
target_link_libraries(tandem INTERFACE tandem_export tandem_train tandem_models tandem_pipeline tandem_data tandem_distribute
  tandem_optim tandem_nn tandem_autograd tandem_backend tandem_core)
target_include_directories(tandem INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
add_library(Tandem::tandem ALIAS tandem)
# Tandem::tandem_cli alone is enough for a program calling tandem::trainer_main (tandem/cli.h).
target_link_libraries(tandem_cli INTERFACE tandem)

set(tandem_installed_libraries tandem_core tandem_backend tandem_autograd tandem_nn tandem_optim tandem_distribute
  tandem_train tandem_export tandem_data tandem_pipeline tandem_models tandem_proto
  tandem_cli tandem_run_outputs tandem_doctor_config tandem_scaling_report)
install(TARGETS ${tandem_installed_libraries} tandem EXPORT TandemTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET tandem_cuda)
  install(TARGETS tandem_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  list(APPEND tandem_installed_libraries tandem_cuda)
endif()
# The installed libraries carry no debug information (strip --strip-debug keeps the symbols that
# linking needs): a RelWithDebInfo tree's libraries are mostly DWARF (docs/EMBEDDING.md gives the
# sizes). TANDEM_INSTALL_DEBUG_INFO=ON keeps it, to debug into Tandem from an installed package.
if(NOT TANDEM_INSTALL_DEBUG_INFO AND CMAKE_STRIP)
  set(tandem_installed_files "")
  foreach(library ${tandem_installed_libraries})
    list(APPEND tandem_installed_files "\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:${library}>")
  endforeach()
  install(CODE "execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug ${tandem_installed_files} COMMAND_ERROR_IS_FATAL ANY)")
endif()
install(EXPORT TandemTargets NAMESPACE Tandem:: DESTINATION ${TANDEM_CMAKE_DIR})

# The public headers: include/tandem/*.h and every project header they reach, found by following
# their #include lines. Internals they must not reach (the kernel table, the plugin ABI, the
# rendezvous, the backends' own headers) stop the configuration: the layering is checked here.
function(tandem_public_headers out)
  set(queue ${ARGN})
  set(seen "")
  while(queue)
    list(POP_FRONT queue header)
    if(header IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${header})
    file(STRINGS ${PROJECT_SOURCE_DIR}/${header} lines REGEX "^#include \"")
    foreach(line ${lines})
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" included "${line}")
      if(included MATCHES "^tandem/")
        set(included include/${included})
      endif()
      if(included STREQUAL "include/tandem/version.h")
        continue()  # generated
      endif()
      if(included MATCHES "^engine/backend/(kernels|plugin_abi|registry|plugin_loader)\\.h$|/cpu/|/cuda/|cpu_rendezvous")
        message(FATAL_ERROR "public header ${header} includes ${included}, which is internal")
      endif()
      if(NOT EXISTS ${PROJECT_SOURCE_DIR}/${included})
        message(FATAL_ERROR "public header ${header} includes ${included}, which is not in the source tree")
      endif()
      list(APPEND queue ${included})
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

file(GLOB tandem_facades RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/tandem/*.h)
# version.h is generated from version.h.in, which includes engine/core/version.h.
tandem_public_headers(TANDEM_PUBLIC_HEADERS ${tandem_facades} engine/core/version.h)
set(TANDEM_PUBLIC_HEADERS ${TANDEM_PUBLIC_HEADERS} CACHE INTERNAL "the installed headers, relative to the source tree")
# Under include/tandem with their paths kept, their #include lines made "tandem/engine/...".
install(CODE "set(TANDEM_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
set(TANDEM_HEADERS \"${TANDEM_PUBLIC_HEADERS};${PROJECT_BINARY_DIR}/include/tandem/version.h\")
set(TANDEM_INCLUDE_DESTINATION \"${CMAKE_INSTALL_INCLUDEDIR}/tandem\")
include(\"${PROJECT_SOURCE_DIR}/cmake/TandemInstallHeaders.cmake\")")

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TandemConfig.cmake.in
  ${PROJECT_BINARY_DIR}/TandemConfig.cmake INSTALL_DESTINATION ${TANDEM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TandemConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TandemConfig.cmake ${PROJECT_BINARY_DIR}/TandemConfigVersion.cmake
  DESTINATION ${TANDEM_CMAKE_DIR})

# Gloo's library for pkg-config users (the static distribute library calls it).
set(TANDEM_PC_GLOO "")
if(TANDEM_HAVE_GLOO)
  get_target_property(gloo_location gloo LOCATION)
  get_filename_component(gloo_dir ${gloo_location} DIRECTORY)
  set(TANDEM_PC_GLOO "-L${gloo_dir} -lgloo")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/tandem.pc.in ${PROJECT_BINARY_DIR}/tandem.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tandem.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
