#include "bench/bench.h"

int main(int argc, char **argv) {
  return dpt_bench_train(argc, argv);
}
