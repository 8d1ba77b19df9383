# Vulkan backend tests (included by tests/CMakeLists.txt). The op conformance suite itself
# (conformance_vulkan) is registered there; this file makes it run under the validation layers
# and adds the Vulkan-specific suite plus conformance runs over the other code paths.
if(DPT_WITH_VULKAN)
  # Any validation error printed by the backend's messenger fails the test, including those
  # raised while a backend is destroyed, which no call can return any more.
  set(_dpt_vk_fail_regex "dptrain vulkan validation ERROR")
  set_tests_properties(conformance_vulkan PROPERTIES ENVIRONMENT "DPT_VULKAN_VALIDATION=1"
                                                     FAIL_REGULAR_EXPRESSION "${_dpt_vk_fail_regex}")

  dpt_add_check_test(NAME test_vulkan SOURCES backends/test_vulkan.c LABELS unit vulkan TIMEOUT 300
                     LIBS Vulkan::Vulkan)
  dpt_add_check_test(NAME test_vulkan_validation TARGET test_vulkan LABELS unit vulkan
                     TIMEOUT 300 ENVIRONMENT DPT_VULKAN_VALIDATION=1)
  # No driver at all: the loader is pointed at an ICD manifest that does not exist.
  dpt_add_check_test(NAME test_vulkan_nodriver TARGET test_vulkan ARGS nodriver
                     LABELS unit vulkan TIMEOUT 30
                     ENVIRONMENT "VK_DRIVER_FILES=${CMAKE_CURRENT_BINARY_DIR}/no-vulkan-icd.json"
                                 "VK_ICD_FILENAMES=${CMAKE_CURRENT_BINARY_DIR}/no-vulkan-icd.json")
  # Validation requested but the layer cannot be found.
  dpt_add_check_test(NAME test_vulkan_nolayer TARGET test_vulkan ARGS nolayer
                     LABELS unit vulkan TIMEOUT 30
                     ENVIRONMENT DPT_VULKAN_VALIDATION=1
                                 "VK_LAYER_PATH=${CMAKE_CURRENT_BINARY_DIR}/no-vulkan-layers")
  file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/no-vulkan-layers")

  # The conformance suite over the paths lavapipe does not take by default: transfers through
  # the staging buffer (discrete GPUs), the portable gemm kernel (every GPU), and the CPU-driver
  # gemms without gemm_tex (gemm_cpu, gemm_small: drivers without uniform texel buffers).
  dpt_add_check_test(NAME conformance_vulkan_staging TARGET conformance ARGS vulkan
                     LABELS conformance vulkan TIMEOUT 600
                     ENVIRONMENT DPT_VULKAN_VALIDATION=1 DPT_VULKAN_FORCE_STAGING=1)
  dpt_add_check_test(NAME conformance_vulkan_portable TARGET conformance ARGS vulkan
                     LABELS conformance vulkan TIMEOUT 600
                     ENVIRONMENT DPT_VULKAN_VALIDATION=1 DPT_VULKAN_PORTABLE=1)
  dpt_add_check_test(NAME conformance_vulkan_no_tex TARGET conformance ARGS vulkan
                     LABELS conformance vulkan TIMEOUT 600
                     ENVIRONMENT DPT_VULKAN_VALIDATION=1 DPT_VULKAN_NO_TEX=1)
  # Embedding bags with windows shrunk to 4 KiB: the tables of several cases span 2 to 23
  # windows (row chunks), the outputs and long bags several sample groups.
  foreach(_op embed_bag embed_bag_bwd)
    dpt_add_check_test(NAME conformance_vulkan_${_op}_split TARGET conformance ARGS vulkan
                       LABELS conformance vulkan TIMEOUT 300
                       ENVIRONMENT DPT_VULKAN_VALIDATION=1 DPT_VULKAN_TEST_MAX_RANGE=4096
                                   CK_RUN_CASE=${_op})
  endforeach()
  set_tests_properties(conformance_vulkan_staging conformance_vulkan_portable
                       conformance_vulkan_no_tex conformance_vulkan_embed_bag_split
                       conformance_vulkan_embed_bag_bwd_split
                       PROPERTIES FAIL_REGULAR_EXPRESSION "${_dpt_vk_fail_regex}")
endif()
