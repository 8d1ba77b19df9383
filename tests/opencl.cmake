# OpenCL backend tests (included by tests/CMakeLists.txt). The op conformance suite
# (conformance_opencl) is registered there; these cover what it does not reach.
if(DPT_WITH_OPENCL)
  dpt_add_check_test(NAME test_opencl SOURCES opencl_backend.c LABELS unit opencl TIMEOUT 120
                     LIBS OpenCL::OpenCL)
  # No ICD at all: OCL_ICD_VENDORS points the loader at an empty directory.
  dpt_add_check_test(NAME test_opencl_nodriver TARGET test_opencl ARGS nodriver
                     LABELS unit opencl TIMEOUT 30
                     ENVIRONMENT "OCL_ICD_VENDORS=${CMAKE_CURRENT_BINARY_DIR}/no-opencl-icd"
                                 "OCL_ICD_FILENAMES=")
  file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/no-opencl-icd")
endif()
