/* dptrain: the command-line tool. Each subcommand turns a failed status into one line on stderr
 * and a non-zero exit; usage errors exit 2. */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "dptrain/advanced.h"
#include "tools/commands.h"
#include "tools/options.h"

static int cmd_bench(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fprintf(argc < 2 ? stderr : stdout,
            "usage: dptrain bench gemm [options]\n       dptrain bench train [options]"
            "\n       dptrain bench allreduce [options]"
            "\n(each takes --help)\n");
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "gemm")) return dpt_bench_gemm(argc - 1, argv + 1);
  if (!strcmp(argv[1], "train")) return dpt_bench_train(argc - 1, argv + 1);
  if (!strcmp(argv[1], "allreduce")) return dpt_bench_allreduce(argc - 1, argv + 1);
  fprintf(stderr, "dptrain bench: unknown benchmark '%s'\n", argv[1]);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    dpt_tool_usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "train")) return dpt_cmd_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "eval")) return dpt_cmd_eval(argc - 1, argv + 1);
  if (!strcmp(cmd, "predict")) return dpt_cmd_predict(argc - 1, argv + 1);
  if (!strcmp(cmd, "checkpoint")) return dpt_cmd_checkpoint(argc - 1, argv + 1);
  if (!strcmp(cmd, "run")) return dpt_cmd_run(argc - 1, argv + 1);
  if (!strcmp(cmd, "tokenize")) return dpt_cmd_tokenize(argc - 1, argv + 1);
  if (!strcmp(cmd, "data")) return dpt_cmd_data(argc - 1, argv + 1);
  if (!strcmp(cmd, "report")) return dpt_cmd_report(argc - 1, argv + 1);
  if (!strcmp(cmd, "devices")) return dpt_cmd_devices(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    printf("dptrain %s\n", dpt_version());
    return 0;
  }
  if (!strcmp(cmd, "help")) return dpt_cmd_help(argc - 1, argv + 1);
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    dpt_tool_usage(stdout);
    return 0;
  }
  fprintf(stderr, "dptrain: unknown command '%s'\n", cmd);
  dpt_tool_usage(stderr);
  return 2;
}
