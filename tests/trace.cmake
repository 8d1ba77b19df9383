# The training timeline (core/train/trace.c): one replica, 3 replicas on the threads transport and,
# with MPI, the same multi-member cases over 2 ranks. jansson reads the files back (about a
# minute in sanitizer builds, whose slow unwinder records every allocation; 5 s otherwise).
dpt_add_check_test(NAME test_trace SOURCES core/train/test_trace.c LIBS PkgConfig::DPT_JANSSON
                   LABELS unit comm cpu TIMEOUT 240)
if(DPT_WITH_MPI)
  dpt_add_check_test(NAME test_trace_mpi_2 TARGET test_trace ARGS mpi LABELS comm mpi TIMEOUT 120
                     LAUNCHER ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
                     ENVIRONMENT OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                                 OMPI_MCA_rmaps_base_oversubscribe=1)
endif()
