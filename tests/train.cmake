# The training core: equivalence of R replicas and one, gradients, weights files, bad input.
dpt_add_check_test(NAME test_train SOURCES test_train.c LABELS unit train TIMEOUT 300)
if(DPT_WITH_MPI)
  foreach(np 2 3)
    set(_dpt_over "")
    if(np GREATER 2)
      set(_dpt_over --oversubscribe)
    endif()
    dpt_add_check_test(NAME test_train_mpi_${np} TARGET test_train ARGS mpi
                       LAUNCHER ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${_dpt_over}
                       LABELS mpi train TIMEOUT 300
                       ENVIRONMENT OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                                   OMPI_MCA_rmaps_base_oversubscribe=1)
  endforeach()
endif()
