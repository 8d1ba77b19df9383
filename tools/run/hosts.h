/* The host file of dptrain run (hosts.c): Open MPI's format, re-read before every attempt. */
#ifndef DPTRAIN_TOOLS_RUN_HOSTS_H
#define DPTRAIN_TOOLS_RUN_HOSTS_H

/* Reads the host file `path` ("HOST [slots=N] ..." a line, '#' comments; a line without
 * slots= is one slot), drops the hosts whose names do not resolve (a line each on stderr) and
 * writes the lines kept to `out`, atomically. *slots: the slots of the lines kept. 0, or -1
 * when the file cannot be read or written or a line is malformed (said on stderr). */
int dpt_hosts_refresh(const char *path, const char *out, int *slots);

#endif
