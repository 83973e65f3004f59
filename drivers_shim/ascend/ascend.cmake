# The Ascend ACL + DCMI backend (drivers_shim/ascend). Both libraries are
# loaded with dlopen at run time; nothing links against them, and no CANN
# header is needed (acl_types.h and dcmi_types.h declare what is used).
target_sources(rasd_drivers PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/acl_api.cc
  ${CMAKE_CURRENT_LIST_DIR}/acl_errors.cc
  ${CMAKE_CURRENT_LIST_DIR}/ascend_driver.cc
  ${CMAKE_CURRENT_LIST_DIR}/dcmi_monitor.cc
)
target_link_libraries(rasd_drivers PRIVATE spdlog::spdlog fmt::fmt)

if(RASD_BUILD_TESTS)
  # libascendcl's and libdcmi's entry points over host memory and host
  # threads (testing/), dlopened by path as the driver opens the real ones.
  add_library(rasd_fake_ascendcl SHARED ${CMAKE_CURRENT_LIST_DIR}/testing/fake_ascendcl.cc)
  add_library(rasd_fake_dcmi SHARED ${CMAKE_CURRENT_LIST_DIR}/testing/fake_dcmi.cc)
  set_target_properties(rasd_fake_ascendcl PROPERTIES
    OUTPUT_NAME fake_ascendcl LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set_target_properties(rasd_fake_dcmi PROPERTIES
    OUTPUT_NAME fake_dcmi LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  foreach(fake rasd_fake_ascendcl rasd_fake_dcmi)
    target_include_directories(${fake} PRIVATE ${CMAKE_CURRENT_LIST_DIR})
    target_link_libraries(${fake} PRIVATE Threads::Threads)
    add_dependencies(drivers_unit_tests ${fake})
  endforeach()

  target_sources(drivers_unit_tests PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/ascend_driver_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/ascend_errors_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/dcmi_link_test.cc
  )
  target_include_directories(drivers_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_compile_definitions(drivers_unit_tests PRIVATE
    RASD_FAKE_ASCENDCL_PATH="$<TARGET_FILE:rasd_fake_ascendcl>"
    RASD_FAKE_DCMI_PATH="$<TARGET_FILE:rasd_fake_dcmi>")
endif()
