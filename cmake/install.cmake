# Install rules (FATHOM_INSTALL, on by default at the top level): the
# libraries, the public headers, the CLI, a CMake package config
# (find_package(fathom) -> fathom::fathom, fathom::fathom_shared and, where
# built, fathom::fathom_cuda) and a pkg-config file (fathom.pc). Both config
# files locate the install from their own path, so a DESTDIR copy works too.
include(CMakePackageConfigHelpers)

set(FATHOM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fathom)
set_target_properties(fathom_shared PROPERTIES EXPORT_NAME fathom_shared)
set(FATHOM_INSTALL_TARGETS fathom fathom_shared)
set(FATHOM_INSTALL_HEADERS include/fathom.h include/fathom_model.h)
if(FATHOM_CUDA)
  list(APPEND FATHOM_INSTALL_TARGETS fathom_cuda)
  list(APPEND FATHOM_INSTALL_HEADERS include/fathom_cuda.h)
endif()
install(TARGETS ${FATHOM_INSTALL_TARGETS} EXPORT fathomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${FATHOM_INSTALL_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(FATHOM_BUILD_TOOLS)
  install(TARGETS fathom_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT fathomTargets NAMESPACE fathom:: DESTINATION ${FATHOM_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fathomConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/fathomConfig.cmake
                              INSTALL_DESTINATION ${FATHOM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fathomConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fathomConfig.cmake ${PROJECT_BINARY_DIR}/fathomConfigVersion.cmake
        DESTINATION ${FATHOM_CMAKE_DIR})

# pkg-config: LAPACK through its own .pc where the system has one, else -llapack.
find_package(PkgConfig QUIET)
pkg_check_modules(FATHOM_PC_LAPACK QUIET lapack)
if(FATHOM_PC_LAPACK_FOUND)
  set(FATHOM_PC_REQUIRES_PRIVATE "lapack jansson libpcre2-8")
  set(FATHOM_PC_LIBS_PRIVATE "-lpthread -lm")
else()
  set(FATHOM_PC_REQUIRES_PRIVATE "jansson libpcre2-8")
  set(FATHOM_PC_LIBS_PRIVATE "-llapack -lblas -lpthread -lm")
endif()
file(RELATIVE_PATH FATHOM_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" FATHOM_PC_TO_PREFIX "${FATHOM_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/fathom.pc.in ${PROJECT_BINARY_DIR}/fathom.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/fathom.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
