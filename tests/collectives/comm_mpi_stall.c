/* A rank stopped during start-up must not hang the job: run under mpiexec -n 2 by
 * comm_mpi_stall_test.sh with DPT_COMM_TIMEOUT set. Rank 1 stops itself (SIGSTOP) before
 * rank 0's blocking start-up call returns:
 *   init:  before MPI_Init_thread, which the library calls inside dpt_comm_create_mpi;
 *   setup: after MPI_Init_thread (this program's), before dpt_comm_create_mpi's collectives.
 * Rank 0's watch must end it with status 69 and a line naming the call; any return from
 * dpt_comm_create_mpi on rank 0 is a failure (exit 1). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/comm.h"

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  const int rank = r ? atoi(r) : -1;
  if (strcmp(mode, "init") && strcmp(mode, "setup")) {
    fprintf(stderr, "usage: comm_mpi_stall init|setup (under mpiexec -n 2)\n");
    return 2;
  }
  if (rank < 0) {
    fprintf(stderr, "not started by Open MPI's mpiexec\n");
    return 77;
  }
  if (!strcmp(mode, "setup")) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  }
  if (rank == 1) raise(SIGSTOP); /* the launcher's kill (SIGKILL) ends it */
  dpt_comm *c = NULL;
  dpt_status st = dpt_comm_create_mpi(NULL, &c);
  fprintf(stderr, "rank %d: dpt_comm_create_mpi returned %s: %s\n", rank, dpt_status_name(st),
          dpt_last_error());
  return 1;
}
