/* The MPI transport when the program never calls MPI_Init: the library initializes MPI on the
 * first communicator and finalizes it when the last one is destroyed. Run under mpiexec. */
#include <mpi.h>
#include <stdio.h>

#include "comm_cases.h"
#include "dptrain/comm.h"

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                                           \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

int main(void) {
  int init = 1, fin = 0;
  MPI_Initialized(&init);
  CHECK(!init, "MPI is initialized before the library was called");

  dpt_comm *a = NULL, *b = NULL;
  CHECK(dpt_comm_create_mpi(NULL, &a) == DPT_OK, "create: %s", dpt_last_error());
  MPI_Initialized(&init);
  CHECK(init, "the library did not initialize MPI");
  CHECK(dpt_comm_create_mpi(NULL, &b) == DPT_OK, "second create: %s", dpt_last_error());
  CHECK(dpt_comm_size(a) >= 2, "run this under mpiexec -n 2 or more");

  char err[1024];
  uint64_t ha = 0, hb = 0;
  CHECK(comm_case_allreduce(a, NULL, 1003, DPT_COMM_F32, &ha, err, sizeof err) == 0, "%s", err);
  dpt_comm_destroy(a);
  MPI_Finalized(&fin);
  CHECK(!fin, "MPI finalized while a communicator is alive");
  CHECK(comm_case_allreduce(b, NULL, 77, DPT_COMM_F16, &hb, err, sizeof err) == 0, "%s", err);
  dpt_comm_destroy(b);
  MPI_Finalized(&fin);
  CHECK(fin, "the library did not finalize the MPI it initialized");

  dpt_comm *c = NULL;
  CHECK(dpt_comm_create_mpi(NULL, &c) == DPT_ERR_UNSUPPORTED && c == NULL,
        "a communicator after MPI_Finalize: %s", dpt_last_error());
  printf("comm_mpi_self_init: ok\n");
  return 0;
}
