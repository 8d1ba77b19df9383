# Collectives: the threads transport in-process, the MPI transport under mpiexec with 2, 3 and
# 4 ranks (4 oversubscribed on a 2-core machine). Every test has a deadline of its own (short
# collective timeouts inside, ctest TIMEOUT outside), so none can hang.
dpt_add_check_test(NAME comm_threads SOURCES collectives/comm_threads.c collectives/comm_cases.c collectives/comm_req_cases.c
                   LABELS unit comm cpu TIMEOUT 240)
# Buffers of the GPU backends (skipped, exit 77, when the backend or its device is absent).
dpt_add_check_test(NAME comm_threads_opencl TARGET comm_threads ARGS opencl
                   LABELS comm opencl TIMEOUT 300 ENVIRONMENT POCL_MAX_PTHREAD_COUNT=1)
dpt_add_check_test(NAME comm_threads_vulkan TARGET comm_threads ARGS vulkan
                   LABELS comm vulkan TIMEOUT 300)
# The watchdog of calls that cannot be bounded otherwise (base/watchdog.c).
dpt_add_check_test(NAME test_watchdog SOURCES base/test_watchdog.c LABELS unit comm TIMEOUT 60)
# The hello round in groups of 64 and 256 threads (dissemination): results, failures, the
# messages each member sends.
dpt_add_check_test(NAME comm_hello SOURCES collectives/comm_hello.c collectives/comm_cases.c LABELS unit comm cpu TIMEOUT 120)
# Sparse table gradients: the (id, row) exchange against the dense all-reduce (threads, 2-4
# replicas), the row-wise SGD and Adagrad updates.
dpt_add_check_test(NAME test_sparse SOURCES collectives/test_sparse.c LABELS unit comm cpu TIMEOUT 240)
# The > 2^31-byte all-reduce: 2 ranks x 2 GiB (+ the check), a few seconds.
dpt_add_check_test(NAME comm_threads_large TARGET comm_threads ARGS large
                   LABELS comm large TIMEOUT 600)

if(DPT_WITH_MPI)
  # Shared-memory channels: a wait for a peer whose process is gone ends naming it.
  dpt_add_check_test(NAME shm_watch SOURCES collectives/shm_watch.c LABELS unit comm TIMEOUT 60)
  set(_dpt_mpi_env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                   OMPI_MCA_rmaps_base_oversubscribe=1)
  # (Sanitizer builds: Open MPI's own allocations are suppressed in tests/CMakeLists.txt.)
  dpt_add_check_test(NAME comm_mpi_2 TARGET comm_mpi SOURCES collectives/comm_mpi.c collectives/comm_cases.c collectives/comm_req_cases.c
                     LIBS MPI::MPI_C LABELS comm mpi TIMEOUT 240
                     LAUNCHER ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
                     ENVIRONMENT ${_dpt_mpi_env})
  dpt_add_check_test(NAME comm_mpi_3 TARGET comm_mpi LABELS comm mpi TIMEOUT 240
                     LAUNCHER ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} 3
                     ENVIRONMENT ${_dpt_mpi_env})
  dpt_add_check_test(NAME comm_mpi_4 TARGET comm_mpi LABELS comm mpi TIMEOUT 300
                     LAUNCHER ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} 4
                     ENVIRONMENT ${_dpt_mpi_env})
  # MPI's own point-to-point path (what ranks on several nodes use) instead of the
  # shared-memory channels.
  dpt_add_check_test(NAME comm_mpi_2_p2p TARGET comm_mpi LABELS comm mpi TIMEOUT 240
                     LAUNCHER ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
                     ENVIRONMENT ${_dpt_mpi_env} DPT_COMM_SHM=0)
  dpt_add_check_test(NAME comm_mpi_3_p2p TARGET comm_mpi LABELS comm mpi TIMEOUT 240
                     LAUNCHER ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} 3
                     ENVIRONMENT ${_dpt_mpi_env} DPT_COMM_SHM=0)
  # 4 ranks as 2 nodes of 2 (DPT_COMM_FAKE_NODES=2): shared-memory channels inside each node,
  # MPI point-to-point between them, in one communicator.
  dpt_add_check_test(NAME comm_mpi_4_nodes TARGET comm_mpi LABELS comm mpi TIMEOUT 300
                     LAUNCHER ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} 4
                     ENVIRONMENT ${_dpt_mpi_env} DPT_COMM_FAKE_NODES=2)
  # The hello round by dissemination (all-to-all is the default up to 4 ranks), over the
  # shared-memory channels and over MPI point-to-point (payloads in eager-size pieces).
  dpt_add_check_test(NAME comm_mpi_4_dissem TARGET comm_mpi LABELS comm mpi TIMEOUT 300
                     LAUNCHER ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} 4
                     ENVIRONMENT ${_dpt_mpi_env} DPT_COMM_HELLO_FLAT_MAX=0)
  dpt_add_check_test(NAME comm_mpi_3_p2p_dissem TARGET comm_mpi LABELS comm mpi TIMEOUT 240
                     LAUNCHER ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} 3
                     ENVIRONMENT ${_dpt_mpi_env} DPT_COMM_SHM=0 DPT_COMM_HELLO_FLAT_MAX=0)
  # Buffers of the GPU backends present (OpenCL, Vulkan) under MPI, 2 ranks.
  dpt_add_check_test(NAME comm_mpi_gpu_2 TARGET comm_mpi ARGS gpu LABELS comm mpi opencl vulkan
                     TIMEOUT 300
                     LAUNCHER ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
                     ENVIRONMENT ${_dpt_mpi_env} POCL_MAX_PTHREAD_COUNT=1)
  # dpt_comm_abort ends a job whose rank 1 is stuck, with the code given, in seconds; a
  # communicator destroyed after a timeout does not wait for that rank.
  dpt_add_check_test(NAME comm_mpi_abort SOURCES collectives/comm_mpi_abort.c LIBS MPI::MPI_C
                     LABELS comm mpi TIMEOUT 60
                     LAUNCHER sh ${CMAKE_CURRENT_LIST_DIR}/scripts/comm_mpi_abort_test.sh
                              ${MPIEXEC_EXECUTABLE}
                     ENVIRONMENT ${_dpt_mpi_env})
  # A rank stopped before MPI_Init_thread, or before the communicator's set-up collectives:
  # rank 0's watch ends the job with status 69 within a few seconds of the deadline.
  dpt_add_check_test(NAME comm_mpi_stall SOURCES collectives/comm_mpi_stall.c LIBS MPI::MPI_C
                     LABELS comm mpi TIMEOUT 90
                     LAUNCHER sh ${CMAKE_CURRENT_LIST_DIR}/scripts/comm_mpi_stall_test.sh
                              ${MPIEXEC_EXECUTABLE}
                     ENVIRONMENT ${_dpt_mpi_env})
  # The library initializes and finalizes MPI itself when the program does not.
  dpt_add_check_test(NAME comm_mpi_self_init SOURCES collectives/comm_mpi_self_init.c collectives/comm_cases.c LIBS MPI::MPI_C
                     LABELS comm mpi TIMEOUT 60
                     LAUNCHER ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
                     ENVIRONMENT ${_dpt_mpi_env})
endif()

# bench allreduce's threads mode on 2 fake nodes x 2: it runs, checks its sums, and the rows
# read `hier` (the auto choice across nodes).
if(DPT_BUILD_TOOLS AND DPT_WITH_MPI)
  add_test(NAME bench_allreduce_threads
           COMMAND sh -c "\"$1\" --threads 4 --nodes 2 --sizes 64K:1M --repeat 3 > \"$2\" && cat \"$2\" && grep -q '^ *262144 *hier ' \"$2\""
                   sh $<TARGET_FILE:bench_allreduce> "${CMAKE_CURRENT_BINARY_DIR}/bench_allreduce_threads.txt")
  set_tests_properties(bench_allreduce_threads PROPERTIES TIMEOUT 120 LABELS "comm;bench")
endif()
