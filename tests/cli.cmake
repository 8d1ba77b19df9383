# The dptrain command: exit codes, bad input, JSON output, weights files, MPI failures.
if(DPT_BUILD_TOOLS)
  set(_dpt_cli_mpi "")
  if(DPT_WITH_MPI)
    set(_dpt_cli_mpi "${MPIEXEC_EXECUTABLE} --oversubscribe")
  endif()
  add_test(NAME cli COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/cli_test.sh" $<TARGET_FILE:dptrain_cli>
                            "${CMAKE_CURRENT_BINARY_DIR}/cli-scratch" "${_dpt_cli_mpi}")
  set_tests_properties(cli PROPERTIES TIMEOUT 600 LABELS "cli;mpi"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
