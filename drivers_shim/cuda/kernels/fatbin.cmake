# The CUDA kernels as an embedded fatbin (drivers_shim/cuda/kernels).
#
# include()d from drivers_shim/CMakeLists.txt after rasd_drivers exists.
# When nvcc is found, rasd_kernels.cu is built with `nvcc --fatbin` and
# embed_fatbin.cmake turns the image into a C++ source defining
# rasd::drivers::cuda::KernelFatbin(); without nvcc that function returns an
# empty span and the CUDA backend runs without kernels. nvcc is a build tool
# only: nothing links against the CUDA toolkit.
#
# Sets RASD_HAVE_CUDA_KERNELS (ON/OFF) for the tests in this scope.

option(RASD_CUDA_KERNELS "Build the CUDA kernels with nvcc when it is found" ON)
set(RASD_CUDA_ARCHS "75;80;86;89;90;100;120" CACHE STRING
    "Real GPU architectures (sm_XX) the kernel fatbin holds machine code for")
set(RASD_CUDA_PTX_ARCH "" CACHE STRING
    "Architecture whose PTX the fatbin carries for newer GPUs (empty: the newest of RASD_CUDA_ARCHS)")
set(RASD_NVCC_FLAGS "" CACHE STRING
    "Extra nvcc flags for the kernels (e.g. -ccbin /usr/bin/g++-12)")

set(rasd_kernels_source ${CMAKE_CURRENT_LIST_DIR}/rasd_kernels.cu)
set(rasd_kernels_dir ${CMAKE_CURRENT_BINARY_DIR}/cuda/kernels)
set(rasd_kernels_fatbin ${rasd_kernels_dir}/rasd_kernels.fatbin)
# Two names, so that switching RASD_CUDA_KERNELS back on never finds the
# empty source newer than an old fatbin and keeps it.
set(rasd_kernels_cc ${rasd_kernels_dir}/kernel_fatbin.cc)
set(rasd_kernels_none_cc ${rasd_kernels_dir}/kernel_fatbin_none.cc)
set(RASD_HAVE_CUDA_KERNELS OFF)

if(RASD_CUDA_KERNELS)
  find_program(RASD_NVCC nvcc
    HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda
    PATH_SUFFIXES bin
    DOC "nvcc, to build the CUDA kernels")
  if(RASD_NVCC AND NOT EXISTS "${RASD_NVCC}")
    message(STATUS "CUDA kernels: RASD_NVCC=${RASD_NVCC} does not exist")
  elseif(RASD_NVCC)
    # Keep the architectures this nvcc can build: CUDA 13 dropped those
    # before sm_75, and older toolkits lack the newest ones.
    execute_process(COMMAND ${RASD_NVCC} --list-gpu-code
      OUTPUT_VARIABLE rasd_nvcc_codes RESULT_VARIABLE rasd_nvcc_result ERROR_QUIET)
    set(rasd_kernels_archs "")
    foreach(arch IN LISTS RASD_CUDA_ARCHS)
      if(NOT rasd_nvcc_result EQUAL 0 OR rasd_nvcc_codes MATCHES "(^|\n)sm_${arch}(\n|$)")
        list(APPEND rasd_kernels_archs ${arch})
      else()
        message(STATUS "CUDA kernels: ${RASD_NVCC} cannot build sm_${arch}; left out")
      endif()
    endforeach()
    set(rasd_kernels_ptx_arch "${RASD_CUDA_PTX_ARCH}")
    if(NOT rasd_kernels_ptx_arch)
      foreach(arch IN LISTS rasd_kernels_archs)
        if(NOT rasd_kernels_ptx_arch OR arch GREATER rasd_kernels_ptx_arch)
          set(rasd_kernels_ptx_arch ${arch})
        endif()
      endforeach()
    endif()
    if(rasd_kernels_archs)
      set(RASD_HAVE_CUDA_KERNELS ON)
    else()
      message(STATUS "CUDA kernels: none of RASD_CUDA_ARCHS (${RASD_CUDA_ARCHS}) builds with ${RASD_NVCC}")
    endif()
  endif()
endif()

if(RASD_HAVE_CUDA_KERNELS)
  set(rasd_kernels_gencode "")
  foreach(arch IN LISTS rasd_kernels_archs)
    list(APPEND rasd_kernels_gencode -gencode arch=compute_${arch},code=sm_${arch})
  endforeach()
  list(APPEND rasd_kernels_gencode
    -gencode arch=compute_${rasd_kernels_ptx_arch},code=compute_${rasd_kernels_ptx_arch})
  string(REPLACE ";" "," rasd_kernels_arch_text "${rasd_kernels_archs}")
  separate_arguments(rasd_nvcc_extra_flags UNIX_COMMAND "${RASD_NVCC_FLAGS}")
  # No --use_fast_math: IEEE division, denormals and exp, as the simulator.
  # -compress-all shrinks the machine code about 4x; cuModuleLoadData
  # accepts compressed images.
  add_custom_command(
    OUTPUT ${rasd_kernels_fatbin}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${rasd_kernels_dir}
    COMMAND ${RASD_NVCC} --fatbin -O3 --threads 2 -Xfatbin -compress-all
            ${rasd_kernels_gencode} ${rasd_nvcc_extra_flags}
            -o ${rasd_kernels_fatbin} ${rasd_kernels_source}
    DEPENDS ${rasd_kernels_source}
    COMMENT "nvcc: CUDA kernels for sm_{${rasd_kernels_arch_text}} + compute_${rasd_kernels_ptx_arch} PTX"
    VERBATIM)
  add_custom_command(
    OUTPUT ${rasd_kernels_cc}
    COMMAND ${CMAKE_COMMAND} -DFATBIN=${rasd_kernels_fatbin} -DOUTPUT=${rasd_kernels_cc}
            -P ${CMAKE_CURRENT_LIST_DIR}/embed_fatbin.cmake
    DEPENDS ${rasd_kernels_fatbin} ${CMAKE_CURRENT_LIST_DIR}/embed_fatbin.cmake
    COMMENT "Embedding the CUDA kernel fatbin"
    VERBATIM)
  message(STATUS "CUDA kernels: ${RASD_NVCC}, sm_{${rasd_kernels_arch_text}} + compute_${rasd_kernels_ptx_arch} PTX")
else()
  # embed_fatbin.cmake without an image writes the empty KernelFatbin().
  set(rasd_kernels_cc ${rasd_kernels_none_cc})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${CMAKE_CURRENT_LIST_DIR}/embed_fatbin.cmake)
  execute_process(COMMAND ${CMAKE_COMMAND} -DOUTPUT=${rasd_kernels_cc}
                  -P ${CMAKE_CURRENT_LIST_DIR}/embed_fatbin.cmake
                  COMMAND_ERROR_IS_FATAL ANY)
  if(RASD_CUDA_KERNELS)
    set(rasd_kernels_why "no usable nvcc")
  else()
    set(rasd_kernels_why "RASD_CUDA_KERNELS=OFF")
  endif()
  message(STATUS "CUDA kernels: none (${rasd_kernels_why}); the CUDA backend will run without kernels")
endif()

target_sources(rasd_drivers PRIVATE ${rasd_kernels_cc})
target_include_directories(rasd_drivers PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda/kernels)
