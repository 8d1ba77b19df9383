#include "bench/bench.h"

int main(int argc, char **argv) {
  return dpt_bench_allreduce(argc, argv);
}
