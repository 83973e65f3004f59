# The CUDA driver API + NVML backend (drivers_shim/cuda). Both libraries are
# loaded with dlopen at run time; nothing links against them.
target_sources(rasd_drivers PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/cuda_driver.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/kernel_geometry.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/nvml_monitor.cc
)
target_include_directories(rasd_drivers PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/kernels)
target_link_libraries(rasd_drivers PRIVATE spdlog::spdlog fmt::fmt)

if(RASD_BUILD_TESTS)
  # libnvidia-ml's entry points over scripted GPUs (tests/fake_nvml.cc).
  add_library(rasd_fake_nvml SHARED ${CMAKE_CURRENT_SOURCE_DIR}/tests/fake_nvml.cc)
  set_target_properties(rasd_fake_nvml PROPERTIES
    OUTPUT_NAME fake_nvml LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(rasd_fake_nvml PRIVATE Threads::Threads)
  # The same without the NVLink entry points: an older libnvidia-ml.
  add_library(rasd_fake_nvml_no_nvlink SHARED ${CMAKE_CURRENT_SOURCE_DIR}/tests/fake_nvml.cc)
  set_target_properties(rasd_fake_nvml_no_nvlink PROPERTIES
    OUTPUT_NAME fake_nvml_no_nvlink LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_definitions(rasd_fake_nvml_no_nvlink PRIVATE RASD_FAKE_NVML_NO_NVLINK)
  target_link_libraries(rasd_fake_nvml_no_nvlink PRIVATE Threads::Threads)
  # libcuda's entry points over host memory, kernels from sim_kernels.cc
  # (tests/fake_cuda.cc).
  # rasd_fake_cuda_noreset: the same without cuDevicePrimaryCtxReset, as
  # an old driver.
  foreach(fake rasd_fake_cuda rasd_fake_cuda_noreset)
    add_library(${fake} SHARED ${CMAKE_CURRENT_SOURCE_DIR}/tests/fake_cuda.cc
                               ${CMAKE_CURRENT_SOURCE_DIR}/sim/sim_kernels.cc)
    string(REPLACE "rasd_" "" output_name ${fake})
    set_target_properties(${fake} PROPERTIES
      OUTPUT_NAME ${output_name} LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests
      CXX_VISIBILITY_PRESET hidden)
    target_include_directories(${fake} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/sim
      ${CMAKE_CURRENT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/common/include)
    target_link_libraries(${fake} PRIVATE tl::expected Threads::Threads)
    # Its stream threads outlive a dlclose (the real libcuda stays loaded
    # too): never unload it.
    target_link_options(${fake} PRIVATE -Wl,-z,nodelete)
  endforeach()
  target_compile_definitions(rasd_fake_cuda_noreset PRIVATE FAKE_CUDA_WITHOUT_CTX_RESET)
  target_sources(drivers_unit_tests PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/nvml_monitor_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/cuda_driver_test.cc
  )
  target_compile_definitions(drivers_unit_tests PRIVATE
    RASD_FAKE_NVML_PATH="$<TARGET_FILE:rasd_fake_nvml>"
    RASD_FAKE_NVML_NO_NVLINK_PATH="$<TARGET_FILE:rasd_fake_nvml_no_nvlink>"
    RASD_FAKE_CUDA_PATH="$<TARGET_FILE:rasd_fake_cuda>"
    RASD_FAKE_CUDA_NORESET_PATH="$<TARGET_FILE:rasd_fake_cuda_noreset>"
    RASD_HAVE_CUDA_KERNELS=$<BOOL:${RASD_HAVE_CUDA_KERNELS}>)
  add_dependencies(drivers_unit_tests rasd_fake_nvml rasd_fake_nvml_no_nvlink rasd_fake_cuda
                   rasd_fake_cuda_noreset)
endif()
