# FATHOM_MINIMAL: the static library from src/common and src/core (the modules
# the CUDA backend uses), then the CUDA backend itself. LAPACK is linked when
# found; otherwise a stub dsyev_ makes fathom_basis_fit fail cleanly (nothing
# here fits a basis).
set(FATHOM_PRIVATE_INCLUDES ${PROJECT_SOURCE_DIR}/src/common ${PROJECT_SOURCE_DIR}/src/core)
file(GLOB FATHOM_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/common/*.c ${PROJECT_SOURCE_DIR}/src/core/*.c)
find_package(LAPACK QUIET)
if(NOT LAPACK_FOUND)
  message(STATUS "FATHOM_MINIMAL: no LAPACK, fathom_basis_fit will fail with FATHOM_ERR_NUMERIC")
  list(APPEND FATHOM_SOURCES ${PROJECT_SOURCE_DIR}/cmake/no_lapack.c)
endif()
add_library(fathom STATIC ${FATHOM_SOURCES})
target_include_directories(fathom PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${FATHOM_PRIVATE_INCLUDES})
target_link_libraries(fathom PUBLIC ${LAPACK_LIBRARIES} Threads::Threads m)
enable_testing()
include(${PROJECT_SOURCE_DIR}/cmake/cuda.cmake)
