# dptrain under a real one-node Slurm (slurm-wlm, started and stopped by the test): srun
# --mpi=pmix against mpiexec, the refusal of srun --mpi=none, the batch script of docs/slurm.md
# (the page's copy checked against the file) stopped, requeued and resumed. Skipped (77)
# without root or slurm-wlm. Serial: it starts daemons on two ports and takes the node's cores.
if(DPT_WITH_MPI AND DPT_BUILD_TOOLS)
  add_test(NAME slurm
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/slurm_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/slurm-scratch"
                   "${MPIEXEC_EXECUTABLE} --oversubscribe"
                   "${PROJECT_SOURCE_DIR}/examples/slurm/train.sbatch"
                   "${PROJECT_SOURCE_DIR}/docs/slurm.md")
  set_tests_properties(slurm PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                       LABELS "cli;mpi;slurm"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
# The same over two nodes of tools/cluster.sh (network namespaces, a slurmd in each): srun -N 2
# -n 4 --mpi=pmix against mpiexec's 4 ranks as 2 nodes of 2. Skipped (77) where namespaces
# cannot be made.
if(DPT_WITH_MPI AND DPT_BUILD_TOOLS)
  add_test(NAME slurm_nodes
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/slurm_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/slurm-nodes-scratch"
                   "${MPIEXEC_EXECUTABLE} --oversubscribe"
                   "${PROJECT_SOURCE_DIR}/examples/slurm/train.sbatch"
                   "${PROJECT_SOURCE_DIR}/docs/slurm.md" "${PROJECT_SOURCE_DIR}/tools/cluster.sh")
  set_tests_properties(slurm_nodes PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                       LABELS "cli;mpi;slurm;cluster"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
