# FATHOM_MINIMAL: the static library from src/common and src/core (the modules
# the CUDA backend uses), then the CUDA backend itself (with FATHOM_PYTHON:
# the package's shared libraries instead, see cmake/python.cmake). LAPACK is linked when
# found; otherwise a stub dsyev_ makes fathom_basis_fit fail cleanly (nothing
# here fits a basis).
set(FATHOM_PRIVATE_INCLUDES ${PROJECT_SOURCE_DIR}/src/common ${PROJECT_SOURCE_DIR}/src/core)
file(GLOB FATHOM_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/common/*.c ${PROJECT_SOURCE_DIR}/src/core/*.c)
find_package(LAPACK QUIET)
if(NOT LAPACK_FOUND)
  message(STATUS "FATHOM_MINIMAL: no LAPACK, fathom_basis_fit will fail with FATHOM_ERR_NUMERIC")
  list(APPEND FATHOM_SOURCES ${PROJECT_SOURCE_DIR}/cmake/no_lapack.c)
endif()
add_library(fathom_objects OBJECT ${FATHOM_SOURCES})
set_target_properties(fathom_objects PROPERTIES C_VISIBILITY_PRESET hidden)
target_include_directories(fathom_objects PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${FATHOM_PRIVATE_INCLUDES})
add_library(fathom STATIC $<TARGET_OBJECTS:fathom_objects>)
add_library(fathom_shared SHARED $<TARGET_OBJECTS:fathom_objects>)
set_target_properties(fathom_shared PROPERTIES OUTPUT_NAME fathom)
foreach(lib fathom fathom_shared)
  target_include_directories(${lib} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${lib} PRIVATE ${LAPACK_LIBRARIES} Threads::Threads m)
endforeach()
if(FATHOM_PYTHON)
  # pip install . -C cmake.define.FATHOM_MINIMAL=ON: the package's libraries only
  include(${PROJECT_SOURCE_DIR}/cmake/python.cmake)
  return()
endif()
enable_testing()
include(${PROJECT_SOURCE_DIR}/cmake/cuda.cmake)
