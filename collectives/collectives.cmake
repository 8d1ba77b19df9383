# Collectives: the communicator (threads transport always, MPI transport with DPT_WITH_MPI),
# ring / recursive doubling / direct all-reduce, broadcast, allgather, barrier, staging.
list(APPEND DPT_SOURCES
     collectives/comm.c
     collectives/comm_options.c
     collectives/comm_util.c
     collectives/allreduce_algo.c
     collectives/coll.c
     collectives/hello.c
     collectives/engine.c
     collectives/ring_allreduce.c
     collectives/hier_allreduce.c
     collectives/rd_allreduce.c
     collectives/chain.c
     collectives/staging.c
     collectives/request.c
     collectives/reduce.c
     collectives/transport_threads.c
     collectives/sparse.c)
if(DPT_WITH_MPI)
  list(APPEND DPT_SOURCES collectives/transport_mpi.c collectives/shm.c)
  list(APPEND DPT_PRIVATE_LIBS MPI::MPI_C)
  list(APPEND DPT_PRIVATE_DEFS DPT_HAVE_MPI)
  list(APPEND DPT_PKG_REQUIRES_PRIVATE ompi-c)
endif()
