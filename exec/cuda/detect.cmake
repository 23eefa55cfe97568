# exec/cuda/detect.cmake — included by the top-level CMakeLists.txt before the modules: decides
# whether the CUDA backend (exec/cuda, library piper_exec_cuda) is built. It needs nvcc (on PATH,
# or under CUDA_HOME or /usr/local/cuda) and NCCL (nccl.h and libnccl under NCCL_HOME, CUDA_HOME,
# /usr/local/cuda or the system). Without them, or with -DPIPER_WITH_CUDA=OFF (a quicker build
# for work that does not touch exec/cuda), it is skipped and everything else builds; the
# sanitizer and fuzz builds always skip it (nvcc's objects carry no ASan instrumentation).
#
# The outcome is written to ${CMAKE_BINARY_DIR}/cuda_backend.txt as "built (...)" or
# "skipped (reason)": scripts/test.sh prints it and .ci/run fails when nvcc exists but the backend
# was skipped, so a broken detection cannot pass CI silently.
set(PIPER_CUDA_ARCHS "80;90" CACHE STRING
    "CUDA architectures of exec/cuda (80 = A100, 90 = H100/H200), e.g. -DPIPER_CUDA_ARCHS=90")
option(PIPER_WITH_CUDA "Build the CUDA backend when nvcc and NCCL are found" ON)
set(PIPER_CUDA OFF)
set(piper_cuda_reason "")

if(NOT PIPER_WITH_CUDA)
  set(piper_cuda_reason "left out by -DPIPER_WITH_CUDA=OFF")
elseif(PIPER_SANITIZE)
  set(piper_cuda_reason "sanitizer build: exec/cuda is left out of -DPIPER_SANITIZE=ON")
elseif(PIPER_FUZZ)
  set(piper_cuda_reason "fuzz build: exec/cuda is left out of -DPIPER_FUZZ=ON")
else()
  # check_language looks on PATH and at CUDACXX; point it at CUDA_HOME or /usr/local/cuda when
  # nvcc is not on PATH, as the toolkit's installer leaves it.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(PIPER_NVCC nvcc HINTS ENV CUDA_HOME PATH_SUFFIXES bin
                 PATHS /usr/local/cuda/bin)
    if(PIPER_NVCC)
      set(ENV{CUDACXX} ${PIPER_NVCC})
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(piper_cuda_reason "no CUDA compiler: nvcc not found on PATH, CUDA_HOME or /usr/local/cuda")
  else()
    get_filename_component(piper_cuda_bin ${CMAKE_CUDA_COMPILER} DIRECTORY)
    get_filename_component(piper_cuda_root ${piper_cuda_bin} DIRECTORY)
    find_path(PIPER_NCCL_INCLUDE nccl.h
              HINTS ENV NCCL_HOME ENV CUDA_HOME ${piper_cuda_root} PATH_SUFFIXES include
              PATHS /usr/local/cuda/include)
    find_library(PIPER_NCCL_LIB nccl
                 HINTS ENV NCCL_HOME ENV CUDA_HOME ${piper_cuda_root} PATH_SUFFIXES lib64 lib
                 PATHS /usr/local/cuda/lib64)
    if(NOT PIPER_NCCL_INCLUDE OR NOT PIPER_NCCL_LIB)
      set(piper_cuda_reason "NCCL not found (nccl.h and libnccl under NCCL_HOME, CUDA_HOME, ${piper_cuda_root} or the system)")
    else()
      set(CMAKE_CUDA_ARCHITECTURES ${PIPER_CUDA_ARCHS})
      enable_language(CUDA)
      find_package(CUDAToolkit)
      if(NOT TARGET CUDA::cublas OR NOT TARGET CUDA::cublasLt OR NOT TARGET CUDA::cudart_static)
        set(piper_cuda_reason "the CUDA toolkit at ${piper_cuda_root} lacks cuBLAS, cuBLASLt or the static CUDA runtime")
      else()
        set(PIPER_CUDA ON)
        # NCCL for the backend's communication (the kernels themselves do not need it).
        add_library(piper_nccl INTERFACE IMPORTED GLOBAL)
        target_include_directories(piper_nccl INTERFACE ${PIPER_NCCL_INCLUDE})
        target_link_libraries(piper_nccl INTERFACE ${PIPER_NCCL_LIB})
      endif()
    endif()
  endif()
endif()

if(PIPER_CUDA)
  set(piper_cuda_status
      "built (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${PIPER_CUDA_ARCHS}, NCCL ${PIPER_NCCL_LIB})")
else()
  set(piper_cuda_status "skipped (${piper_cuda_reason})")
endif()
message(STATUS "CUDA backend: ${piper_cuda_status}")
file(WRITE ${CMAKE_BINARY_DIR}/cuda_backend.txt "${piper_cuda_status}\n")
