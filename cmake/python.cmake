# FATHOM_PYTHON (pip install ., scikit-build-core): the shared libraries of the
# Python package, installed into it (component python). Included by
# CMakeLists.txt and cmake/core-only.cmake once fathom_objects / fathom_shared
# exist.
#   libfathom.so       always (FATHOM_MINIMAL: common + core only; the package
#                      then reports io/eval/model functions as absent on call)
#   libfathom_cuda.so  with FATHOM_CUDA=ON: src/cuda + the same C objects and a
#                      static CUDA runtime, so it loads next to torch's runtime
# One plain file each (a wheel holds no symlinks), loaded by path with ctypes.
set_property(TARGET fathom_shared PROPERTY VERSION)
set_property(TARGET fathom_shared PROPERTY SOVERSION)
install(TARGETS fathom_shared LIBRARY DESTINATION fathom COMPONENT python)
if(FATHOM_CUDA)
  include(${PROJECT_SOURCE_DIR}/cmake/cuda.cmake)
endif()
