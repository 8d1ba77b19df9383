/* Internal: the options a communicator starts with (comm_options.c). */
#ifndef DPTRAIN_COLLECTIVES_COMM_OPTIONS_H
#define DPTRAIN_COLLECTIVES_COMM_OPTIONS_H

#include "dptrain/comm.h"

/* The defaults, then the environment variables of comm.h, validated for communicator c;
 * an invalid value is DPT_ERR_INVALID_ARG naming the variable. */
dpt_status dpt_comm_options_init(const dpt_comm *c, dpt_comm_options *o);

/* DPT_COMM_HELLO_FLAT_MAX over *flat_max (dpt_comm.hello_flat_max: the largest group that
 * says hello all-to-all); unchanged when unset. */
dpt_status dpt_comm_hello_flat_env(int *flat_max);
/* The deadline a communicator will have before one exists (MPI_Init_thread, the set-up
 * collectives): DPT_COMM_TIMEOUT, or the default when it is unset or invalid (creation then
 * reports the bad value). */
double dpt_comm_env_timeout(void);

#endif
