/* Internal: every environment variable dptrain reads, in one table. The library reads them
 * through dpt_env_get, which refuses a name the table does not hold; docs/reference.md is
 * printed from the table (dptrain help --reference), and ctest `env_table` checks that every
 * getenv("DPT_...") of the sources is an entry. */
#ifndef DPTRAIN_BASE_ENV_H
#define DPTRAIN_BASE_ENV_H

#include <stddef.h>

/* Who sets a variable. */
typedef enum dpt_env_kind {
  DPT_ENV_USER,     /* a setting for users */
  DPT_ENV_TEST,     /* for tests only: forces a path a test machine would not take */
  DPT_ENV_LAUNCHER, /* set by mpirun, Slurm or the shell; read, never needed by hand */
} dpt_env_kind;

/* X(name, kind, default, what it does). The default is what unset means. */
#define DPT_ENV_MAP(X)                                                                             \
  X(DPT_ALLREDUCE_ALGO, USER, "auto",                                                              \
    "all-reduce algorithm: auto, ring, rd, direct, mpi, hier (docs/collectives.md)")               \
  X(DPT_ALLREDUCE_DIRECT_MAX, USER, "16K",                                                         \
    "bytes: auto uses direct while (ranks - 1) x payload is at most this")                         \
  X(DPT_ALLREDUCE_MPI_MAX, USER, "0", "bytes: then MPI_Allreduce up to this (MPI only)")           \
  X(DPT_ALLREDUCE_MPI_NODES_MAX, USER, "1M",                                                       \
    "bytes: across nodes, MPI_Allreduce after rd up to this")                                      \
  X(DPT_ALLREDUCE_RD_MAX, USER, "16K",                                                             \
    "bytes: then recursive doubling up to this, the ring above")                                   \
  X(DPT_COMM_PIECE, USER, "128K", "bytes of one ring message (K, M, G suffixes)")                  \
  X(DPT_COMM_BLOCK, USER, "512K", "bytes of one ring block and staging chunk")                     \
  X(DPT_COMM_TIMEOUT, USER, "300", "seconds any wait of a communicator may take")                  \
  X(DPT_COMM_DESYNC_CHECK, USER, "1", "0: no check that every rank calls the same collective")     \
  X(DPT_COMM_STAGING, USER, "auto", "device buffers in collectives: auto, inline, thread")         \
  X(DPT_COMM_SHM, USER, "1", "0: MPI point-to-point for every message, no shared-memory channels") \
  X(DPT_COMM_SHM_COPY, USER, "auto",                                                               \
    "how shared-memory slots are written: auto, cached, streaming")                                \
  X(DPT_COMM_HELLO_FLAT_MAX, USER, "4",                                                            \
    "ranks: groups up to this size say hello all-to-all, larger ones by dissemination")            \
  X(DPT_CPU_GEMM, USER, "openblas when built with it, else portable",                              \
    "the CPU backend's gemm: openblas, portable, portable-baseline")                               \
  X(DPT_CPU_CONV, USER, "onednn when built with it, else im2col",                                  \
    "the CPU backend's convolutions: onednn, im2col (gemm), reference (loops)")                    \
  X(DPT_EXCHANGE, USER, "the kind the settings call for",                                          \
    "force the step's exchange kind by name (docs/training.md, Exchange kinds)")                   \
  X(DPT_FUSE, USER, "1", "0: every layer runs alone, without the planner's fused ops")             \
  X(DPT_VULKAN_VALIDATION, USER, "0",                                                              \
    "1: Vulkan validation layers on; an error message fails the next call")                        \
  X(DPT_COMM_FAKE_NODES, TEST, "",                                                                 \
    "K: every K consecutive ranks of a node count as a node of their own")                         \
  X(DPT_VULKAN_FORCE_STAGING, TEST, "0",                                                           \
    "1: transfers through the staging buffer even where memory is host-visible")                   \
  X(DPT_VULKAN_PORTABLE, TEST, "0", "1: the portable gemm kernel even on a CPU driver")            \
  X(DPT_VULKAN_NO_TEX, TEST, "0",                                                                  \
    "1: the CPU-driver ops without gemm_tex.spv and the other texture shaders")                    \
  X(DPT_VULKAN_TEST_MAX_RANGE, TEST, "",                                                           \
    "bytes (>= 1024): pretend maxStorageBufferRange is this, to split small dispatches")           \
  X(DPT_FAULT_EXIT_AT_STEP, TEST, "",                                                              \
    "N: rank 0 ends its process with status 137 after step N, before its checkpoint")              \
  X(DPT_FAULT_ONCE_FILE, TEST, "",                                                                 \
    "FILE: DPT_FAULT_EXIT_AT_STEP only when FILE does not exist, which it then creates")           \
  X(DPT_TEST_SLOW_REPLICA, TEST, "", "I:F: replica I's forward and backward take F times as long") \
  X(DPT_TEST_NODES, TEST, "", "the node count the comm_mpi test expects")                          \
  X(DPT_TEST_EXACT_MUTATE, TEST, "",                                                               \
    "order: --deterministic sums a replica's groups in float first; exponent: each replica "       \
    "scales by its own exponents (both break the promise, for the test that must see it)")         \
  X(OMPI_COMM_WORLD_RANK, LAUNCHER, "", "this rank (Open MPI), before MPI starts")                 \
  X(PMIX_RANK, LAUNCHER, "", "this rank (PMIx); set: launched as an MPI job")                      \
  X(PMI_RANK, LAUNCHER, "", "this rank (MPICH)")                                                   \
  X(SLURM_PROCID, LAUNCHER, "", "this rank (Slurm)")                                               \
  X(OMPI_COMM_WORLD_SIZE, LAUNCHER, "", "set: launched by mpirun")                                 \
  X(PMI_SIZE, LAUNCHER, "", "set: launched as an MPI job")                                         \
  X(SLURM_STEP_NUM_TASKS, LAUNCHER, "", "checked against the world size (srun)")                   \
  X(OMPI_COMM_WORLD_LOCAL_SIZE, LAUNCHER, "",                                                      \
    "ranks on this node (Open MPI), where MPI_COMM_TYPE_SHARED cannot say")                        \
  X(MPI_LOCALNRANKS, LAUNCHER, "", "ranks on this node (MPICH), the same fallback")                \
  X(OMPI_COMM_WORLD_LOCAL_RANK, LAUNCHER, "",                                                      \
    "this rank on its node (Open MPI), where MPI_COMM_TYPE_SHARED cannot say")                     \
  X(MPI_LOCALRANKID, LAUNCHER, "", "this rank on its node (MPICH), the same fallback")             \
  X(SLURM_LOCALID, LAUNCHER, "", "this rank on its node (Slurm), the same fallback")               \
  X(TMPDIR, LAUNCHER, "/tmp", "where tests write their scratch files")

/* One entry of the table. */
typedef struct dpt_env_var {
  const char *name;
  dpt_env_kind kind;
  const char *def;  /* what unset means */
  const char *help; /* one line */
} dpt_env_var;

/* The table, in DPT_ENV_MAP's order; *count its entries. */
const dpt_env_var *dpt_env_table(size_t *count);

/* getenv(name) for a name of the table. A name outside it is a programming error: a line on
 * stderr and abort(), in every build, so a read the table does not list cannot ship. */
const char *dpt_env_get(const char *name);

#endif
