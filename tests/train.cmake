# The training core: equivalence of R replicas and one, gradients, weights files, bad input.
dpt_add_check_test(NAME test_train SOURCES core/train/test_train.c LIBS PkgConfig::DPT_JANSSON dptrain_prep
                   LABELS unit train TIMEOUT 300)
# The batch split: proportional with a slowed replica equals even within 1e-5, its shares.
dpt_add_check_test(NAME test_train_split SOURCES core/train/test_train_split.c LABELS unit train TIMEOUT 300
                   ENVIRONMENT OPENBLAS_NUM_THREADS=1)
# Replicas on two backends in one process (threads): the same parameters as two CPU replicas.
dpt_add_check_test(NAME test_train_mixed_opencl TARGET test_train_split ARGS mixed opencl
                   LABELS train opencl TIMEOUT 300 ENVIRONMENT POCL_MAX_PTHREAD_COUNT=1)
dpt_add_check_test(NAME test_train_mixed_vulkan TARGET test_train_split ARGS mixed vulkan
                   LABELS train vulkan TIMEOUT 300 ENVIRONMENT DPT_VULKAN_VALIDATION=1)
# Checkpoints in training: resume bit for bit, at other world sizes, rollback, stop requests.
dpt_add_check_test(NAME test_resume SOURCES core/train/test_resume.c LABELS unit train TIMEOUT 300)
# Layer graphs: gradients of every layer kind, model files, batch norm buffers, sync-bn.
dpt_add_check_test(NAME test_model SOURCES core/model/test_model.c LABELS unit train TIMEOUT 600)
# The recommendation model: DLRM's layers against finite differences, its builder, BCE, JSON.
dpt_add_check_test(NAME test_dlrm SOURCES core/train/test_dlrm.c LABELS unit train TIMEOUT 300)
# Training on per-replica shards: each replica reads only its own, the header rule's steps, the
# same parameters as one model on the union of the slices, validation AUC/logloss as computed
# directly, bad readers refused.
dpt_add_check_test(NAME test_train_shards SOURCES core/train/test_train_shards.c LIBS dptrain_prep LABELS unit train
                   TIMEOUT 300)
dpt_add_check_test(NAME test_dlrm_opencl TARGET test_dlrm ARGS backend opencl
                   LABELS train opencl TIMEOUT 300 ENVIRONMENT POCL_MAX_PTHREAD_COUNT=1)
dpt_add_check_test(NAME test_dlrm_vulkan TARGET test_dlrm ARGS backend vulkan
                   LABELS train vulkan TIMEOUT 300 ENVIRONMENT DPT_VULKAN_VALIDATION=1)
# Tables beyond the Vulkan windows (shrunk to 4 KiB): AdamW steps on the device equal the CPU's.
dpt_add_check_test(NAME test_dlrm_vulkan_big_table TARGET test_dlrm ARGS backend vulkan big
                   LABELS train vulkan TIMEOUT 300
                   ENVIRONMENT DPT_VULKAN_VALIDATION=1 DPT_VULKAN_TEST_MAX_RANGE=4096)
dpt_add_check_test(NAME test_train_shards_vulkan_big_table TARGET test_train_shards
                   ARGS backend vulkan LABELS train vulkan TIMEOUT 300
                   ENVIRONMENT DPT_VULKAN_VALIDATION=1 DPT_VULKAN_TEST_MAX_RANGE=4096)
dpt_add_check_test(NAME test_model_opencl TARGET test_model ARGS backend opencl
                   LABELS train opencl TIMEOUT 300 ENVIRONMENT POCL_MAX_PTHREAD_COUNT=1)
dpt_add_check_test(NAME test_model_vulkan TARGET test_model ARGS backend vulkan
                   LABELS train vulkan TIMEOUT 300 ENVIRONMENT DPT_VULKAN_VALIDATION=1)
# GPU backends train like the CPU: 2 replicas, 20 steps, within 1e-4 of one CPU replica.
dpt_add_check_test(NAME test_train_opencl TARGET test_train ARGS backend opencl
                   LABELS train opencl TIMEOUT 300 ENVIRONMENT POCL_MAX_PTHREAD_COUNT=1)
dpt_add_check_test(NAME test_train_vulkan TARGET test_train ARGS backend vulkan
                   LABELS train vulkan TIMEOUT 300 ENVIRONMENT DPT_VULKAN_VALIDATION=1)
if(DPT_WITH_MPI)
  set(_dpt_mpi_env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                   OMPI_MCA_rmaps_base_oversubscribe=1 POCL_MAX_PTHREAD_COUNT=1)
  foreach(np 2 3)
    dpt_add_check_test(NAME test_train_mpi_${np} TARGET test_train ARGS mpi cpu
                       LAUNCHER ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${np}
                       LABELS mpi train TIMEOUT 300 ENVIRONMENT ${_dpt_mpi_env})
  endforeach()
  foreach(np 2 3)
    dpt_add_check_test(NAME test_model_mpi_${np} TARGET test_model ARGS mpi
                       LAUNCHER ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${np}
                       LABELS mpi train TIMEOUT 300 ENVIRONMENT ${_dpt_mpi_env})
  endforeach()
  dpt_add_check_test(NAME test_resume_mpi_2 TARGET test_resume ARGS mpi
                     LAUNCHER ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} 2
                     LABELS mpi train TIMEOUT 300 ENVIRONMENT ${_dpt_mpi_env})
  # Mixed vendors in one job: rank 0 on OpenCL, rank 1 on Vulkan, staged through host memory.
  dpt_add_check_test(NAME test_train_mpi_mixed TARGET test_train ARGS mpi opencl,vulkan
                     LAUNCHER ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
                     LABELS mpi train opencl vulkan TIMEOUT 600 ENVIRONMENT ${_dpt_mpi_env})
endif()
# Checkpoints through the command under mpirun: SIGTERM, SIGKILL, a corrupt
# newest checkpoint, refused settings, dptrain run's relaunch.
if(DPT_WITH_MPI AND DPT_BUILD_TOOLS)
  add_test(NAME resume_cli
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/resume_cli_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/resume-scratch"
                   "${MPIEXEC_EXECUTABLE} --oversubscribe")
  set_tests_properties(resume_cli PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli;mpi;train"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  # dptrain run: a rank failing once, at the same step every time, with a recorded cause; a
  # host file that shrinks; --min-ranks.
  add_test(NAME run_cmd
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/run_cmd_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/run-cmd-scratch"
                   "${MPIEXEC_EXECUTABLE} --oversubscribe")
  set_tests_properties(run_cmd PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 LABELS "cli;mpi;train"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
