# The dptrain command: exit codes, bad input, JSON output, weights files, MPI failures.
if(DPT_BUILD_TOOLS)
  set(_dpt_cli_mpi "")
  if(DPT_WITH_MPI)
    set(_dpt_cli_mpi "${MPIEXEC_EXECUTABLE} --oversubscribe")
  endif()
  # Writes the test's safetensors data sets through the library (no Python needed).
  add_executable(st_dataset_gen fixtures/st_dataset_gen.c)
  target_link_libraries(st_dataset_gen PRIVATE dptrain_static)
  target_include_directories(st_dataset_gen PRIVATE ${PROJECT_SOURCE_DIR})
  # Writes a checkpoint from a weights file through the library's checkpoint writer.
  add_executable(ckpt_gen fixtures/ckpt_gen.c)
  target_link_libraries(ckpt_gen PRIVATE dptrain_static)
  target_include_directories(ckpt_gen PRIVATE ${PROJECT_SOURCE_DIR})
  add_test(NAME cli COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_test.sh" $<TARGET_FILE:dptrain_cli>
                            "${CMAKE_CURRENT_BINARY_DIR}/cli-scratch" "${_dpt_cli_mpi}"
                            $<TARGET_FILE:st_dataset_gen> $<TARGET_FILE:ckpt_gen>)
  set_tests_properties(cli PROPERTIES TIMEOUT 600 LABELS "cli;mpi"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()

# Command-line conventions: --opt=value, "--", prefixes refused, --config under the command line,
# bad config files, --print-config read back, the options in settings.json and checkpoints.
if(DPT_BUILD_TOOLS)
  add_test(NAME cli_options COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_options_test.sh"
                                    $<TARGET_FILE:dptrain_cli> "${CMAKE_CURRENT_BINARY_DIR}/cli-options-scratch")
  set_tests_properties(cli_options PROPERTIES TIMEOUT 120 LABELS "cli")
  # --help, docs/reference.md, the bash completion and the man page list the same options.
  add_test(NAME cli_docs COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_docs_test.sh"
                                 $<TARGET_FILE:dptrain_cli> "${PROJECT_SOURCE_DIR}/docs/reference.md"
                                 "${PROJECT_BINARY_DIR}/tools/dptrain.bash-completion"
                                 "${PROJECT_BINARY_DIR}/tools/dptrain.1" "${PROJECT_BINARY_DIR}")
  set_tests_properties(cli_docs PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "cli;lint")
endif()

# The param_hash of fixed training runs on Fashion-MNIST (tests/scripts/param_hash_test.sh).
if(DPT_BUILD_TOOLS)
  add_test(NAME param_hash COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/param_hash_test.sh"
                                   $<TARGET_FILE:dptrain_cli> "${_dpt_cli_mpi}")
  set_tests_properties(param_hash PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli;mpi;train"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()

# --deterministic: the same param_hash on any number of replicas, ranks, exchanges, and across a
# resume at another world size (tests/scripts/deterministic_test.sh), per backend.
if(DPT_BUILD_TOOLS)
  foreach(_b cpu opencl vulkan)
    add_test(NAME deterministic_${_b}
             COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/deterministic_test.sh"
                     $<TARGET_FILE:dptrain_cli> ${_b} "${_dpt_cli_mpi}")
    set_tests_properties(deterministic_${_b} PROPERTIES TIMEOUT 400 SKIP_RETURN_CODE 77
                         LABELS "cli;mpi;train;${_b}"
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endforeach()
endif()

# A ResNet's weights and buffers read by PyTorch (tools/pytorch_reference.py, strict
# load_state_dict) give dptrain's logits; skipped without /usr/bin/python3's torch.
if(DPT_BUILD_TOOLS)
  add_test(NAME pytorch_roundtrip
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/pytorch_roundtrip_test.sh"
                   $<TARGET_FILE:dptrain_cli> "${PROJECT_SOURCE_DIR}/tools/pytorch_reference.py"
                   "${CMAKE_CURRENT_BINARY_DIR}/pytorch-scratch")
  set_tests_properties(pytorch_roundtrip PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                       LABELS "cli;train;pytorch")
endif()

# BERT in PyTorch on `dptrain tokenize --export`'s sequences: its state_dict names and shapes
# are dpt_model_spec_bert's and read back strictly; where dptrain trains --model bert, its
# weights load in torch with dptrain eval's validation loss (1e-3). Skipped without torch.
if(DPT_BUILD_TOOLS)
  add_test(NAME pytorch_bert
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/pytorch_bert_test.sh"
                   $<TARGET_FILE:dptrain_cli> "${PROJECT_SOURCE_DIR}/tools/pytorch_reference.py"
                   "${CMAKE_CURRENT_BINARY_DIR}/pytorch-bert-scratch")
  set_tests_properties(pytorch_bert PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "cli;text;train;pytorch")
endif()

# DLRM in PyTorch (tools/pytorch_reference.py's DLRM): dpt_model_spec_dlrm's weights load with a
# strict load_state_dict and give dptrain's logits (1e-5) and BCE loss on a fixed batch of
# records, for the dot and cat interactions, bags with sum and mean. Skipped without torch.
add_executable(dlrm_dump fixtures/dlrm_dump.c)
target_link_libraries(dlrm_dump PRIVATE dptrain_static)
target_include_directories(dlrm_dump PRIVATE ${PROJECT_SOURCE_DIR})
add_test(NAME pytorch_dlrm
         COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/pytorch_dlrm_test.sh" $<TARGET_FILE:dlrm_dump>
                 "${PROJECT_SOURCE_DIR}/tools/pytorch_reference.py"
                 "${CMAKE_CURRENT_BINARY_DIR}/pytorch-dlrm-scratch")
set_tests_properties(pytorch_dlrm PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "train;pytorch")

# dptrain train --model dlrm on synthetic shards: one-line refusals (no match, fewer shards than
# ranks, a corrupt shard, ids beyond a table), a short run's validation AUC/logloss, 2 MPI ranks
# equal to 2 thread replicas, a resume on other shards refused.
if(DPT_BUILD_TOOLS)
  add_test(NAME dlrm_cli
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/dlrm_cli_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/dlrm-cli-scratch" "${_dpt_cli_mpi}")
  set_tests_properties(dlrm_cli PROPERTIES TIMEOUT 300 LABELS "cli;mpi;train"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()

# dptrain bench train --model dlrm on a tiny synthetic set: the dense and sparse columns, sane
# values, per-rank peak RSS next to the shards, 2 MPI ranks, one-line refusals.
if(DPT_BUILD_TOOLS)
  add_test(NAME bench_dlrm_cli
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/bench_dlrm_cli_test.sh"
                   $<TARGET_FILE:dptrain_cli> "${CMAKE_CURRENT_BINARY_DIR}/bench-dlrm-cli-scratch"
                   "${_dpt_cli_mpi}")
  set_tests_properties(bench_dlrm_cli PROPERTIES TIMEOUT 120 LABELS "cli;mpi;train"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()

# dptrain eval on DLRM weights: the training run's last validation AUC/logloss again, recall@k
# on a hand-made ranking set, one-line refusals (weights without a DLRM, shards of another
# layout or larger tables).
if(DPT_BUILD_TOOLS)
  add_test(NAME dlrm_eval_cli
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/dlrm_eval_cli_test.sh"
                   $<TARGET_FILE:dptrain_cli> "${CMAKE_CURRENT_BINARY_DIR}/dlrm-eval-cli-scratch")
  set_tests_properties(dlrm_eval_cli PROPERTIES TIMEOUT 300 LABELS "cli;train")
endif()

# tools/cluster.sh: 2 nodes as network namespaces on this machine; 2 nodes x 2 ranks are 2 nodes
# to MPI and train to the param_hash of 4 ranks on one node, and comm_mpi's nodes case there
# (shared memory inside each node, MPI between); up and down leave nothing behind.
# Skipped (77) without root or network namespaces.
if(DPT_BUILD_TOOLS AND DPT_WITH_MPI)
  add_test(NAME cluster
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/cluster_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/cluster-scratch" "${_dpt_cli_mpi}"
                   $<TARGET_FILE:comm_mpi>)
  set_tests_properties(cluster PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "mpi;cluster"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()

# Network faults on that cluster: a cut link ends every rank within the deadline naming a rank
# across it; a 1 s flap and a lossy token bucket (tc tbf) leave the parameters as unfaulted.
# Alone (RUN_SERIAL), as chaos below: both time an end against the deadline + 2 s.
if(DPT_BUILD_TOOLS AND DPT_WITH_MPI)
  add_test(NAME netfault
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/netfault_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/netfault-scratch")
  set_tests_properties(netfault PROPERTIES TIMEOUT 200 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE LABELS "mpi;cluster"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()

# tools/chaos.sh, short: 3 seeded faults (SIGKILL, SIGSTOP, a full checkpoint disk) into a job
# dptrain run restarts: all survived, no hang, no corrupt resume, the uninterrupted parameters.
if(DPT_BUILD_TOOLS AND DPT_WITH_MPI)
  add_test(NAME chaos
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/chaos_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/chaos-scratch")
  set_tests_properties(chaos PROPERTIES TIMEOUT 200 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE LABELS "cli;mpi;train"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()

# A survivor's checkpoint: with the full step and sparse checkpoints, a rank SIGKILLed or
# SIGSTOPped mid-run costs at most one step: the other rank writes the last completed step, and
# --resume ends on the uninterrupted run's param_hash; the sharded step writes nothing and says why.
if(DPT_BUILD_TOOLS AND DPT_WITH_MPI)
  add_test(NAME survivor
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/survivor_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/survivor-scratch" "${_dpt_cli_mpi}")
  set_tests_properties(survivor PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE LABELS "cli;mpi;train"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
