# CUDA backend: library fathom_cuda (src/cuda/*.cu), tests tests/cuda/test_*.cu
# (exit 77 without a GPU), benchmarks bench/cuda/bench_*.cu. Included by
# CMakeLists.txt when FATHOM_CUDA=ON.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)

# The directory's C flags (-Wall ..., sanitizers) mean nothing to nvcc: CUDA
# targets take their own, host-side ones through -Xcompiler.
set(FATHOM_CUDA_FLAGS -Xcompiler=-Wall,-Wextra -lineinfo)
if(FATHOM_SANITIZE)
  list(APPEND FATHOM_CUDA_FLAGS -Xcompiler=-fsanitize=address,-fsanitize=undefined,-fno-omit-frame-pointer)
endif()

function(fathom_cuda_target target)
  set_property(TARGET ${target} PROPERTY COMPILE_OPTIONS "")
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${FATHOM_CUDA_FLAGS}>
                                           $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra>)
endfunction()

file(GLOB FATHOM_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cu)
if(FATHOM_PYTHON)
  # libfathom_cuda.so for the Python package (fathom.tier): the CUDA sources
  # with their own copy of the C objects (the internal functions they call are
  # hidden in libfathom.so), so fathom_last_error of this library reports its
  # failures. The CUDA runtime is linked statically: the process's torch brings
  # its own, and both drive the same device context and streams.
  add_library(fathom_cuda_shared SHARED ${FATHOM_CUDA_SOURCES} $<TARGET_OBJECTS:fathom_objects>)
  fathom_cuda_target(fathom_cuda_shared)
  set_target_properties(fathom_cuda_shared PROPERTIES OUTPUT_NAME fathom_cuda CUDA_RUNTIME_LIBRARY Static)
  target_include_directories(fathom_cuda_shared PRIVATE ${PROJECT_SOURCE_DIR}/include ${FATHOM_PRIVATE_INCLUDES}
                                                        ${PROJECT_SOURCE_DIR}/src/cuda)
  target_link_libraries(fathom_cuda_shared PRIVATE $<TARGET_PROPERTY:fathom_shared,LINK_LIBRARIES>
                                                   CUDA::cudart_static)
  install(TARGETS fathom_cuda_shared LIBRARY DESTINATION fathom COMPONENT python)
  return()
endif()
add_library(fathom_cuda STATIC ${FATHOM_CUDA_SOURCES})
fathom_cuda_target(fathom_cuda)
target_include_directories(fathom_cuda PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                              $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
                           PRIVATE ${FATHOM_PRIVATE_INCLUDES} ${PROJECT_SOURCE_DIR}/src/cuda)
target_link_libraries(fathom_cuda PUBLIC fathom CUDA::cudart)

file(GLOB FATHOM_CUDA_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/cuda/test_*.cu)
foreach(src ${FATHOM_CUDA_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  fathom_cuda_target(${name})
  target_include_directories(${name} PRIVATE ${FATHOM_PRIVATE_INCLUDES} ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests/support)
  target_link_libraries(${name} PRIVATE fathom_cuda)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests)
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900)
endforeach()

file(GLOB FATHOM_CUDA_BENCHES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/bench/cuda/bench_*.cu)
foreach(src ${FATHOM_CUDA_BENCHES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  fathom_cuda_target(${name})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE fathom_cuda CUDA::cuda_driver)
endforeach()

# The stable API alone, from C11: compiled (not run) so that a header change
# that needs FATHOM_CUDA_EXPERIMENTAL for the plain path fails the build.
add_library(fathom_cuda_stable_api OBJECT ${PROJECT_SOURCE_DIR}/tests/cuda/stable_api.c)
target_link_libraries(fathom_cuda_stable_api PRIVATE fathom_cuda)
