# OpenCL backend tests (included by tests/CMakeLists.txt). The op conformance suite
# (conformance_opencl) is registered there; these cover what it does not reach.
if(DPT_WITH_OPENCL)
  dpt_add_check_test(NAME test_opencl SOURCES backends/test_opencl.c LABELS unit opencl TIMEOUT 120
                     LIBS OpenCL::OpenCL)
  # No ICD at all: OCL_ICD_VENDORS points the loader at an empty directory.
  dpt_add_check_test(NAME test_opencl_nodriver TARGET test_opencl ARGS nodriver
                     LABELS unit opencl TIMEOUT 30
                     ENVIRONMENT "OCL_ICD_VENDORS=${CMAKE_CURRENT_BINARY_DIR}/no-opencl-icd"
                                 "OCL_ICD_FILENAMES=")
  file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/no-opencl-icd")
endif()

# The OpenCL ops under Oclgrind's checkers, its log required empty (label `oclgrind`). Not in
# sanitizer builds: Oclgrind is preloaded, and AddressSanitizer must be the first library.
find_program(DPT_OCLGRIND oclgrind)
if(DPT_WITH_OPENCL AND DPT_OCLGRIND AND NOT DPT_SANITIZE)
  add_test(NAME conformance_opencl_oclgrind
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/oclgrind_test.sh" "${DPT_OCLGRIND}"
                   $<TARGET_FILE:conformance> "${CMAKE_CURRENT_BINARY_DIR}/oclgrind.log")
  set_tests_properties(conformance_opencl_oclgrind PROPERTIES TIMEOUT 900 LABELS "oclgrind;opencl"
                                                              SKIP_RETURN_CODE 77)
elseif(DPT_WITH_OPENCL AND NOT DPT_OCLGRIND)
  message(STATUS "oclgrind not found: the OpenCL ops are not checked under it (apt-get install oclgrind)")
endif()
