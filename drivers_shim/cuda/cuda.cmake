# The CUDA driver API + NVML backend (drivers_shim/cuda). Both libraries are
# loaded with dlopen at run time; nothing links against them.
target_sources(rasd_drivers PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/nvml_monitor.cc
)
target_include_directories(rasd_drivers PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda)
target_link_libraries(rasd_drivers PRIVATE spdlog::spdlog fmt::fmt)

if(RASD_BUILD_TESTS)
  # libnvidia-ml's entry points over scripted GPUs (tests/fake_nvml.cc).
  add_library(rasd_fake_nvml SHARED ${CMAKE_CURRENT_SOURCE_DIR}/tests/fake_nvml.cc)
  set_target_properties(rasd_fake_nvml PROPERTIES
    OUTPUT_NAME fake_nvml LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(rasd_fake_nvml PRIVATE Threads::Threads)
  target_sources(drivers_unit_tests PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/nvml_monitor_test.cc
  )
  target_compile_definitions(drivers_unit_tests PRIVATE
    RASD_FAKE_NVML_PATH="$<TARGET_FILE:rasd_fake_nvml>")
  add_dependencies(drivers_unit_tests rasd_fake_nvml)
endif()
