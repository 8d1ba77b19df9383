# The Python module (python/): the same param_hash as `dptrain train` for the same settings (1
# replica, 2 thread replicas, 2 MPI ranks, normalization, a start from saved weights, NumPy
# data), callbacks, evaluation, weights files, errors; and its two installs (CMake, pip).
# Skipped (77) without python3-numpy, python3-cffi (or python3-pip for the install test).
if(DPT_PYTHON AND TARGET dptrain_python)
  set(_dpt_py_env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  # Sanitizer builds: the interpreter is not instrumented, so the scripts preload the
  # sanitizer's runtime into it (and leave Python's own allocations at exit unchecked).
  set(_dpt_asan "")
  if(DPT_SANITIZE)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                    OUTPUT_VARIABLE _dpt_asan OUTPUT_STRIP_TRAILING_WHITESPACE)
  endif()
  set(_dpt_py_mpi "")
  if(DPT_WITH_MPI)
    set(_dpt_py_mpi "${MPIEXEC_EXECUTABLE} --oversubscribe")
  endif()
  if(DPT_BUILD_TOOLS)
    add_test(NAME python_module
             COMMAND bash "${PROJECT_SOURCE_DIR}/python/tests/python_test.sh" "${DPT_PYTHON}"
                     "${PROJECT_BINARY_DIR}/python" $<TARGET_FILE:dptrain_cli>
                     "${CMAKE_CURRENT_BINARY_DIR}/python-scratch" "${_dpt_py_mpi}" "${_dpt_asan}")
    set_tests_properties(python_module PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                         LABELS "python;mpi;train" ENVIRONMENT "${_dpt_py_env}")
  endif()
  add_test(NAME python_install
           COMMAND bash "${PROJECT_SOURCE_DIR}/python/tests/install_test.sh" "${DPT_PYTHON}"
                   "${PROJECT_BINARY_DIR}" "${PROJECT_SOURCE_DIR}/python"
                   "${CMAKE_CURRENT_BINARY_DIR}/python-install-scratch" "${_dpt_asan}")
  set_tests_properties(python_install PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "python;install" ENVIRONMENT "${_dpt_py_env}")
endif()
