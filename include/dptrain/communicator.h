/* dptrain: communicators, created and destroyed (the training tier: what dpt_train takes to run
 * one replica per MPI rank; a threads group for replicas inside one process). The collectives
 * on them are the advanced tier: dptrain/comm.h, which also describes their guarantees and the
 * environment variables read when a communicator is created.
 */
#ifndef DPTRAIN_COMMUNICATOR_H
#define DPTRAIN_COMMUNICATOR_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpt_comm dpt_comm;
typedef struct dpt_comm_group dpt_comm_group;

/* Element types of reductions. F16 is IEEE binary16 and BF16 bfloat16 (a float32's top 16
 * bits), both stored as uint16_t; their sums are computed in float32 and rounded to the
 * 16-bit type after every addition. I64 is int64_t, summed modulo 2^64: exact and associative,
 * so its sums are the same bits in any order (fixed-point gradients). The values travel in
 * hello headers: never renumber. */
typedef enum dpt_comm_dtype {
  DPT_COMM_F32 = 0,
  DPT_COMM_F16 = 1,
  DPT_COMM_BF16 = 2,
  DPT_COMM_I64 = 3
} dpt_comm_dtype;

/* ---- creation ------------------------------------------------------------------------------ */

/* Threads transport: a group of `size` (>= 1) members in this process. Each thread obtains
 * its member with dpt_comm_group_member() (once per rank) and destroys it with
 * dpt_comm_destroy(). The group is freed once dpt_comm_group_destroy() was called and every
 * member obtained from it was destroyed, in any order. */
DPT_API dpt_status dpt_comm_group_create(int size, dpt_comm_group **out);
DPT_API dpt_status dpt_comm_group_member(dpt_comm_group *group, int rank, dpt_comm **out);
DPT_API void dpt_comm_group_destroy(dpt_comm_group *group);

/* 1 if the MPI transport was compiled into this library, else 0. */
DPT_API int dpt_comm_mpi_compiled(void);
/* 1 if this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx),
 * from the environment it sets; whether or not MPI is compiled in. */
DPT_API int dpt_comm_mpi_launched(void);
/* DPT_OK unless a scheduler started more tasks than the MPI world holds, so that each task
 * would train alone as a duplicate: Slurm's SLURM_STEP_NUM_TASKS (srun sets it in each task
 * of a step) above 1 with `comm` NULL (the process was not started as an MPI rank), or above
 * comm's size when srun started the ranks itself. Ranks that mpirun started are not compared
 * (under Slurm its daemons are the step's tasks). DPT_ERR_MISMATCH names both numbers and
 * the fix (srun --mpi=pmix). */
DPT_API dpt_status dpt_comm_check_launch(const dpt_comm *comm);

/* MPI transport: `mpi_comm` points to an MPI_Comm (the caller's variable: `MPI_Comm c; ...
 * dpt_comm_create_mpi(&c, &comm)`), or is NULL for MPI_COMM_WORLD. Collective over that
 * communicator (it calls MPI_Comm_dup). If the application has not initialized MPI, this
 * initializes it (MPI_Init_thread, MPI_THREAD_SERIALIZED requested), and MPI is finalized
 * when the last communicator created that way is destroyed (MPI cannot be initialized
 * twice: creating one after that fails). DPT_ERR_MISMATCH on every rank when the ranks'
 * DPT_COMM_* / DPT_ALLREDUCE_* settings differ (the message names the variable and the
 * ranks). DPT_ERR_UNSUPPORTED when MPI is not compiled in. */
DPT_API dpt_status dpt_comm_create_mpi(const void *mpi_comm, dpt_comm **out);

/* Frees the member. NULL does nothing. Local: it never waits for other ranks, except that
 * destroying the last communicator of a library that initialized MPI itself calls
 * MPI_Finalize, which waits for every rank; so does the application's own MPI_Finalize.
 * After DPT_ERR_TIMEOUT (or DPT_ERR_COMM) under MPI a peer may be stopped or gone, and that
 * wait would last for ever: end the job with dpt_comm_abort instead. */
DPT_API void dpt_comm_destroy(dpt_comm *comm);

/* Ends the whole job at once: MPI_Abort(comm's processes, code), which stops every rank
 * (the launcher usually exits with `code`) without waiting for any of them, and ends this
 * process with _exit(code) 1.5 s later where MPI_Abort cannot reach the launcher; for when a
 * collective failed with DPT_ERR_TIMEOUT or DPT_ERR_COMM and MPI_Finalize could wait for a
 * stopped peer for ever. Returns only when it could not: DPT_ERR_UNSUPPORTED for a threads
 * communicator (nothing to end: its members are threads of this process; nothing is done) or
 * when MPI is already finalized, DPT_ERR_COMM when MPI_Abort fails, DPT_ERR_INVALID_ARG for
 * NULL (nothing is done). */
DPT_API dpt_status dpt_comm_abort(dpt_comm *comm, int code);

/* Notes that the launcher is ending the job (Open MPI's SIGTERM before its SIGKILL,
 * odls_base_sigkill_timeout later): from then on a wait of an MPI collective that has seen no
 * message for 0.25 s fails with DPT_ERR_COMM, so that a rank waiting on a peer that is gone
 * without an error (across a network) can still leave in order, e.g. write a checkpoint.
 * Async-signal-safe: meant for a SIGTERM handler. */
DPT_API void dpt_comm_note_teardown(void);

/* This member's rank, 0 .. size - 1, and the number of members. */
DPT_API int dpt_comm_rank(const dpt_comm *comm);
DPT_API int dpt_comm_size(const dpt_comm *comm);
/* This member's place among the members on its machine, 0 .. (members there) - 1: the device it
 * takes. MPI: its rank in MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) (the launcher's
 * environment only where that fails; DPT_COMM_FAKE_NODES does not change it); threads: its
 * rank. -1 for NULL. */
DPT_API int dpt_comm_local_rank(const dpt_comm *comm);
/* "mpi" or "threads". */
DPT_API const char *dpt_comm_transport(const dpt_comm *comm);

/* Nodes (machines) the ranks run on: 1 for a threads communicator, or when every MPI rank
 * shares this one; 0 for NULL. */
DPT_API int dpt_comm_nodes(const dpt_comm *comm);

#ifdef __cplusplus
}
#endif

#endif
