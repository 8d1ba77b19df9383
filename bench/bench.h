/* Benchmarks: each is a whole command-line program body, shared by its own executable
 * (bench_<name>) and by `dptrain bench <name>`. They print tables, never assert speed. */
#ifndef DPTRAIN_BENCH_H
#define DPTRAIN_BENCH_H

#include <stddef.h>

/* argv[0] is the benchmark's name; returns the process exit code. */
int dpt_bench_gemm(int argc, char **argv);
int dpt_bench_allreduce(int argc, char **argv);
int dpt_bench_train(int argc, char **argv);
/* bench train --model dlrm (bench/train_dlrm.c), called by dpt_bench_train. */
int dpt_bench_train_dlrm(int argc, char **argv);
/* The first of argv's options that only --model dlrm takes, or NULL. */
const char *dpt_bench_train_dlrm_only(int argc, char **argv);

/* Parses "a,b,c" into out[0..max): every value in 1..max_value, at least one. 0 on success,
 * -1 on anything else. Shared by the benchmarks' and the dptrain tool's command lines. */
int dpt_parse_size_list(const char *s, size_t *out, size_t max, size_t max_value, size_t *count);

/* Parses "a,b,c" into out[0..max): finite floats a float holds (not rounding to 0 or infinity),
 * at least one. 0 on success, -1 on anything else. */
int dpt_parse_float_list(const char *s, float *out, size_t max, size_t *count);

/* Median of n values (sorts them in place). */
double dpt_bench_median(double *v, int n);
/* Removes a benchmark's scratch directory and the files in it. */
void dpt_bench_remove_dir(const char *dir);

/* Under MPI: a barrier over MPI_COMM_WORLD that waits asleep (1 ms naps), so that ranks
 * waiting for the one being measured take no core or memory bandwidth from it (a rank
 * spinning in MPI_Barrier would). Without MPI compiled in: nothing. */
void dpt_bench_sleeping_barrier(void);

#endif
