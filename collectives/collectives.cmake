# Collectives: the communicator (threads transport always, MPI transport with DPT_WITH_MPI),
# ring / recursive doubling / direct all-reduce, broadcast, allgather, barrier, staging.
# api/: the communicator and its entry points; engine/: one collective in progress and the
# message engine; algorithms/: the schedules; transports/: threads, MPI, shared memory;
# common/: what every layer shares (element types, tags, names, the sums).
list(APPEND DPT_SOURCES
     collectives/api/comm.c
     collectives/api/comm_options.c
     collectives/api/allreduce_algo.c
     collectives/api/request.c
     collectives/api/sparse.c
     collectives/api/agree.c
     collectives/engine/coll.c
     collectives/engine/hello.c
     collectives/engine/staging.c
     collectives/engine/engine.c
     collectives/algorithms/ring_allreduce.c
     collectives/algorithms/hier_allreduce.c
     collectives/algorithms/rd_allreduce.c
     collectives/algorithms/chain.c
     collectives/common/comm_util.c
     collectives/common/reduce.c
     collectives/common/running.c
     collectives/transports/transport.c
     collectives/transports/backoff.c
     collectives/transports/transport_threads.c)
if(DPT_WITH_MPI)
  list(APPEND DPT_SOURCES collectives/transports/transport_mpi.c collectives/transports/shm.c)
  list(APPEND DPT_PRIVATE_LIBS MPI::MPI_C)
  list(APPEND DPT_PRIVATE_DEFS DPT_HAVE_MPI)
  list(APPEND DPT_PKG_REQUIRES_PRIVATE ompi-c)
endif()
