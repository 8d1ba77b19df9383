# bench/gpu-check.sh on this build's drivers (tests/scripts/gpu_check_test.sh): its refusals, and
# --quick runs of every stage but the build, whose results files hold every stage's section and
# a device line. Skipped (77) without MPI or without an OpenCL and a Vulkan device.
if(DPT_BUILD_TOOLS)
  add_test(NAME gpu_check
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/gpu_check_test.sh"
                   "${PROJECT_SOURCE_DIR}/bench/gpu-check.sh" "${PROJECT_BINARY_DIR}"
                   "${CMAKE_CURRENT_BINARY_DIR}/gpu-check-scratch")
  set_tests_properties(gpu_check PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77
                       LABELS "cli;mpi;bench;opencl;vulkan"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
