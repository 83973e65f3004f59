# The Ascend ACL + DCMI backend (drivers_shim/ascend). Both libraries are
# loaded with dlopen at run time; nothing links against them, and no CANN
# header is needed (acl_types.h and dcmi_types.h declare what is used).
target_sources(rasd_drivers PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/acl_api.cc
  ${CMAKE_CURRENT_LIST_DIR}/acl_errors.cc
  ${CMAKE_CURRENT_LIST_DIR}/aclnn_ops.cc
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

  # CANN's operator library (aclnn entry points and libnnopbase's tensors)
  # over the stand-in ACL's memory and streams, computing with the
  # simulator's kernels (testing/fake_opapi.cc). Named libopapi.so beside
  # the stand-in libascendcl, where the driver looks for it by default.
  add_library(rasd_fake_opapi SHARED ${CMAKE_CURRENT_LIST_DIR}/testing/fake_opapi.cc
                                     ${CMAKE_CURRENT_SOURCE_DIR}/sim/sim_kernels.cc)
  # The same without aclnnMatmul: a library that lacks one operator.
  add_library(rasd_fake_opapi_no_matmul SHARED ${CMAKE_CURRENT_LIST_DIR}/testing/fake_opapi.cc
                                               ${CMAKE_CURRENT_SOURCE_DIR}/sim/sim_kernels.cc)
  target_compile_definitions(rasd_fake_opapi_no_matmul PRIVATE RASD_FAKE_OPAPI_WITHOUT_MATMUL)
  foreach(fake rasd_fake_opapi rasd_fake_opapi_no_matmul)
    set_target_properties(${fake} PROPERTIES
      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests CXX_VISIBILITY_PRESET hidden)
    target_include_directories(${fake} PRIVATE ${CMAKE_CURRENT_LIST_DIR}
      ${CMAKE_CURRENT_SOURCE_DIR}/sim ${CMAKE_CURRENT_SOURCE_DIR}/include
      ${PROJECT_SOURCE_DIR}/common/include)
    # As the real libopapi depends on the runtime: the one loaded copy of
    # the stand-in ACL (matched by soname) owns memory and streams.
    target_link_libraries(${fake} PRIVATE rasd_fake_ascendcl tl::expected Threads::Threads)
    add_dependencies(drivers_unit_tests ${fake})
  endforeach()
  set_target_properties(rasd_fake_opapi PROPERTIES OUTPUT_NAME opapi)
  set_target_properties(rasd_fake_opapi_no_matmul PROPERTIES OUTPUT_NAME fake_opapi_no_matmul)

  target_sources(drivers_unit_tests PRIVATE
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/ascend_driver_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/ascend_errors_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/ascend_kernels_test.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/dcmi_link_test.cc
  )
  target_include_directories(drivers_unit_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_compile_definitions(drivers_unit_tests PRIVATE
    RASD_FAKE_ASCENDCL_PATH="$<TARGET_FILE:rasd_fake_ascendcl>"
    RASD_FAKE_DCMI_PATH="$<TARGET_FILE:rasd_fake_dcmi>"
    RASD_FAKE_OPAPI_PATH="$<TARGET_FILE:rasd_fake_opapi>"
    RASD_FAKE_OPAPI_NO_MATMUL_PATH="$<TARGET_FILE:rasd_fake_opapi_no_matmul>")
endif()
