# The GPU runner: kernels/ compiled by nvcc (CUDA, sm_80 + sm_90) and by hipcc (HIP,
# gfx90a + gfx1030) from one source, the host emulation of the same arithmetic, and the
# ckpt-gpu binary. CKPT_GPU picks the backend linked into ckpt-gpu and the tests:
#   AUTO  CUDA when nvcc is found, else HIP when hipcc is found, else none
#   CUDA / HIP  that one (an error when its compiler is missing)
#   OFF   none (ckpt-gpu still runs --backend emulate)
# Independently, every GPU compiler found compiles the kernels (CKPT_GPU_COMPILE_ALL), so
# a machine without a GPU still proves both backends build.
set(CKPT_GPU "AUTO" CACHE STRING "GPU backend for ckpt-gpu: AUTO, CUDA, HIP or OFF")
option(CKPT_GPU_COMPILE_ALL "Compile the kernels with every GPU compiler found" ON)
if((CKPT_SANITIZE OR CKPT_FUZZ) AND CKPT_GPU STREQUAL "AUTO")
  set(CKPT_GPU "OFF")  # sanitizer and fuzz builds test host code; the normal build compiles kernels
  set(CKPT_GPU_COMPILE_ALL OFF)
endif()

# Every .cu of kernels/ (a file per kernel family, the device lanes, the backend, the
# benchmarks: kernels/README.md), compiled by each GPU compiler found.
file(GLOB CKPT_KERNEL_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/*.cu)
file(GLOB CKPT_KERNEL_HEADERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/*.h)
set(CKPT_KERNEL_DEPS ${CKPT_KERNEL_HEADERS} ${CMAKE_SOURCE_DIR}/libconvert/verify/backend.h
    ${CMAKE_SOURCE_DIR}/libconvert/verify/opening_backend.h)

# --- compilers -------------------------------------------------------------------------
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
find_program(CKPT_HIPCC hipcc)

set(CKPT_HAVE_CUDA OFF)
if(NOT CKPT_GPU STREQUAL "OFF" OR CKPT_GPU_COMPILE_ALL)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER AND NOT CKPT_GPU STREQUAL "HIP" OR CKPT_GPU STREQUAL "CUDA" OR
     (CMAKE_CUDA_COMPILER AND CKPT_GPU_COMPILE_ALL))
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
    enable_language(CUDA)
    # CMake 3.25 does not know that nvcc 12+ takes C++20.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    find_package(CUDAToolkit REQUIRED)
    set(CKPT_HAVE_CUDA ON)
  endif()
endif()

set(CKPT_BACKEND "none")
if(CKPT_GPU STREQUAL "CUDA" OR (CKPT_GPU STREQUAL "AUTO" AND CKPT_HAVE_CUDA))
  set(CKPT_BACKEND "cuda")
elseif(CKPT_GPU STREQUAL "HIP" OR (CKPT_GPU STREQUAL "AUTO" AND CKPT_HIPCC))
  if(NOT CKPT_HIPCC)
    message(FATAL_ERROR "CKPT_GPU=HIP but hipcc was not found")
  endif()
  set(CKPT_BACKEND "hip")
endif()
message(STATUS "ckpt-gpu backend: ${CKPT_BACKEND} (nvcc: ${CKPT_HAVE_CUDA}, hipcc: ${CKPT_HIPCC})")

# --- the host emulation (always) ---------------------------------------------------------
add_library(ckpt_kernels_host STATIC ${CMAKE_SOURCE_DIR}/kernels/backend_emulate.cpp)
target_include_directories(ckpt_kernels_host PUBLIC ${CMAKE_SOURCE_DIR}/kernels)
target_compile_options(ckpt_kernels_host PRIVATE -ffp-contract=off)
target_link_libraries(ckpt_kernels_host PUBLIC libconvert)

# --- CUDA kernels ------------------------------------------------------------------------
if(CKPT_HAVE_CUDA)
  add_library(ckpt_kernels_cuda STATIC ${CKPT_KERNEL_SRC})
  target_include_directories(ckpt_kernels_cuda PRIVATE ${CMAKE_SOURCE_DIR}/kernels ${CMAKE_SOURCE_DIR}/libconvert)
  # Exact arithmetic: no FMA contraction, IEEE division, denormals kept.
  target_compile_options(ckpt_kernels_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-fmad=false -ftz=false -prec-div=true -prec-sqrt=true -Xcompiler=-Wall,-Wextra>)
  if(CKPT_WERROR)
    target_compile_options(ckpt_kernels_cuda PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror;--Werror;all-warnings>")
  endif()
  target_link_libraries(ckpt_kernels_cuda PUBLIC CUDA::cudart_static)
endif()

# --- HIP kernels (hipcc drives clang; one object per .cu, archived; linked when chosen) ---
if(CKPT_HIPCC AND (CKPT_BACKEND STREQUAL "hip" OR CKPT_GPU_COMPILE_ALL))
  set(CKPT_HIP_WERROR "")
  if(CKPT_WERROR)
    set(CKPT_HIP_WERROR -Werror)
  endif()
  set(CKPT_HIP_OBJS "")
  foreach(src ${CKPT_KERNEL_SRC})
    get_filename_component(name ${src} NAME_WE)
    set(obj ${CMAKE_BINARY_DIR}/kernels_hip/${name}.o)
    add_custom_command(
      OUTPUT ${obj}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/kernels_hip
      COMMAND ${CKPT_HIPCC} -std=c++20 -O3 -ffp-contract=off -fPIC -x hip --offload-arch=gfx90a --offload-arch=gfx1030
              -Wall -Wextra ${CKPT_HIP_WERROR} -I${CMAKE_SOURCE_DIR}/kernels -I${CMAKE_SOURCE_DIR}/libconvert
              -c ${src} -o ${obj}
      DEPENDS ${src} ${CKPT_KERNEL_DEPS}
      COMMENT "Compiling kernels/${name}.cu with hipcc (gfx90a, gfx1030)")
    list(APPEND CKPT_HIP_OBJS ${obj})
  endforeach()
  set(CKPT_HIP_LIB ${CMAKE_BINARY_DIR}/libckpt_kernels_hip.a)
  add_custom_command(OUTPUT ${CKPT_HIP_LIB} COMMAND ${CMAKE_COMMAND} -E rm -f ${CKPT_HIP_LIB}
                     COMMAND ${CMAKE_AR} rcs ${CKPT_HIP_LIB} ${CKPT_HIP_OBJS} DEPENDS ${CKPT_HIP_OBJS})
  add_custom_target(ckpt_kernels_hip_lib ALL DEPENDS ${CKPT_HIP_LIB})
endif()

# --- the backend ckpt-gpu and the tests link -----------------------------------------------
add_library(ckpt_gpu_backend INTERFACE)
if(CKPT_BACKEND STREQUAL "cuda")
  target_link_libraries(ckpt_gpu_backend INTERFACE ckpt_kernels_cuda)
elseif(CKPT_BACKEND STREQUAL "hip")
  add_library(ckpt_kernels_hip STATIC IMPORTED GLOBAL)
  set_target_properties(ckpt_kernels_hip PROPERTIES IMPORTED_LOCATION ${CKPT_HIP_LIB})
  add_dependencies(ckpt_kernels_hip ckpt_kernels_hip_lib)
  find_library(CKPT_AMDHIP amdhip64 REQUIRED)
  target_link_libraries(ckpt_gpu_backend INTERFACE ckpt_kernels_hip ${CKPT_AMDHIP})
else()
  add_library(ckpt_kernels_none STATIC ${CMAKE_SOURCE_DIR}/kernels/backend_none.cpp)
  target_include_directories(ckpt_kernels_none PRIVATE ${CMAKE_SOURCE_DIR}/kernels)
  target_link_libraries(ckpt_kernels_none PUBLIC libconvert)
  target_link_libraries(ckpt_gpu_backend INTERFACE ckpt_kernels_none)
endif()

add_executable(ckpt-gpu ${CMAKE_SOURCE_DIR}/apps/ckpt-gpu/main.cpp)
target_include_directories(ckpt-gpu PRIVATE ${CMAKE_SOURCE_DIR}/kernels)
target_link_libraries(ckpt-gpu PRIVATE libconvert ckpt_kernels_host ckpt_gpu_backend CLI11::CLI11)
# A copied build tree runs on a GPU machine without these packages: lib/ beside the binary.
set_target_properties(ckpt-gpu PROPERTIES BUILD_RPATH "\$ORIGIN/lib" INSTALL_RPATH "\$ORIGIN/lib")

if(CKPT_BUILD_TESTS)
  enable_testing()
  set(CKPT_HIP_BUILT OFF)
  if(TARGET ckpt_kernels_hip_lib)
    set(CKPT_HIP_BUILT ON)
  endif()
  set(CKPT_CUDA_LIB_FILE none)
  if(TARGET ckpt_kernels_cuda)
    set(CKPT_CUDA_LIB_FILE $<TARGET_FILE:ckpt_kernels_cuda>)
  endif()
  add_test(NAME gpu_kernels_compiled
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/gpu/check_kernels_built.sh ${CKPT_CUDA_LIB_FILE}
                   ${CMAKE_BINARY_DIR}/libckpt_kernels_hip.a ${CKPT_HAVE_CUDA} ${CKPT_HIP_BUILT})
  set_tests_properties(gpu_kernels_compiled PROPERTIES SKIP_RETURN_CODE 77)
endif()
