# A run's log directory (core/log/): CRC-32C known answers, the TensorBoard event encoder's bytes,
# an event file read back frame by frame, the directory's refusal of another run's files.
dpt_add_check_test(NAME test_tb_events SOURCES core/log/test_tb_events.c
                   LIBS PkgConfig::DPT_JANSSON LABELS unit TIMEOUT 60)

# dptrain train --log-dir: the files of 2 thread replicas and 2 MPI ranks, the event file decoded
# by protobuf against the JSON lines (tests/scripts/tb_events_check.py), a resume appending, bad
# directories refused. Skipped (77) without /usr/bin/python3's protobuf (python3-protobuf).
if(DPT_BUILD_TOOLS)
  set(_dpt_log_mpi "")
  if(DPT_WITH_MPI)
    set(_dpt_log_mpi "${MPIEXEC_EXECUTABLE} --oversubscribe")
  endif()
  add_test(NAME log_dir_cli
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/log_dir_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/log-dir-scratch"
                   "${CMAKE_CURRENT_SOURCE_DIR}/scripts/tb_events_check.py" "${_dpt_log_mpi}")
  set_tests_properties(log_dir_cli PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli;mpi;train"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
