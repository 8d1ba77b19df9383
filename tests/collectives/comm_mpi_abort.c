/* dpt_comm_abort ends a job whose peer is stuck, and destroying a communicator after a
 * timeout does not wait for that peer. Run under mpiexec -n 2 by comm_mpi_abort_test.sh,
 * which expects the job to end with status 3 (the code given to dpt_comm_abort) in seconds,
 * although rank 1 sleeps for a minute without entering any collective.
 *
 * Rank 0: two all-reduces time out (0.3 s deadline), the second communicator is destroyed
 * (timed: it must not wait for rank 1), then dpt_comm_abort(c, 3). A return from it is a
 * failure (exit 1); so is rank 1 waking up (exit 9). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dptrain/comm.h"

int main(int argc, char **argv) {
  int provided, rank;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  dpt_comm *c = NULL, *c2 = NULL;
  if (dpt_comm_create_mpi(NULL, &c) != DPT_OK || dpt_comm_create_mpi(NULL, &c2) != DPT_OK ||
      dpt_comm_set_timeout(c, 0.3) != DPT_OK || dpt_comm_set_timeout(c2, 0.3) != DPT_OK) {
    fprintf(stderr, "rank %d: creation: %s\n", rank, dpt_last_error());
    return 1;
  }
  if (rank != 0) {
    nanosleep(&(struct timespec){.tv_sec = 60}, NULL);
    fprintf(stderr, "rank %d: still alive after 60 s: the abort did not end the job\n", rank);
    return 9;
  }
  /* The calls that cannot end a job say so and do nothing. */
  dpt_comm_group *g = NULL;
  dpt_comm *t = NULL;
  if (dpt_comm_abort(NULL, 3) != DPT_ERR_INVALID_ARG || dpt_comm_group_create(1, &g) != DPT_OK ||
      dpt_comm_group_member(g, 0, &t) != DPT_OK || dpt_comm_abort(t, 3) != DPT_ERR_UNSUPPORTED) {
    fprintf(stderr, "dpt_comm_abort on NULL or a threads member: %s\n", dpt_last_error());
    return 1;
  }
  dpt_comm_destroy(t);
  dpt_comm_group_destroy(g);
  float x[1000] = {0};
  dpt_status st = dpt_allreduce_host(c, x, 1000, DPT_COMM_F32);
  dpt_status st2 = dpt_allreduce_host(c2, x, 1000, DPT_COMM_F32);
  if (st != DPT_ERR_TIMEOUT || st2 != DPT_ERR_TIMEOUT) {
    fprintf(stderr, "expected two timeouts: %s, %s: %s\n", dpt_status_name(st),
            dpt_status_name(st2), dpt_last_error());
    return 1;
  }
  const double t0 = MPI_Wtime();
  dpt_comm_destroy(c2);
  printf("destroy after the timeout returned in %.3f s\n", MPI_Wtime() - t0);
  fflush(stdout);
  st = dpt_comm_abort(c, 3);
  fprintf(stderr, "dpt_comm_abort returned %s: %s\n", dpt_status_name(st), dpt_last_error());
  return 1;
}
