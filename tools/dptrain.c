/* dptrain: the command-line tool. Each subcommand turns a failed status into one line on stderr
 * and a non-zero exit; usage errors exit 2. */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "dptrain/advanced.h"
#include "tools/commands.h"

static void usage(FILE *f) {
  fprintf(f, "usage: dptrain <command> [options]\n"
             "\n"
             "commands:\n"
             "  train              data-parallel training (dptrain train --help)\n"
             "  eval               test loss, accuracy and confusion matrix of saved weights\n"
             "  predict            class probabilities per input from saved weights\n"
             "  checkpoint info    what a checkpoint holds, its CRCs checked (a file or a dir)\n"
             "  checkpoint export  a checkpoint's model weights, for eval, predict and PyTorch\n"
             "  run                a command restarted after failures (dptrain run --help)\n"
             "  tokenize           learn a BPE vocabulary from text (dptrain tokenize --help)\n"
             "  data               recommendation data: convert Criteo text, synth, debian, info\n"
             "  devices            list every backend and device found, one per line\n"
             "  bench gemm         gemm GFLOP/s per backend and size (dptrain bench gemm --help)\n"
             "  bench train        training samples/s: 1 replica bare, 1 replica, R replicas\n"
             "  bench allreduce    all-reduce time and bandwidth next to MPI_Allreduce\n"
             "  version            print the version\n"
             "  help               this text\n");
}

/* One line per device: "<backend>:<index>  <type>  <name>  (<vendor>, <memory>, <driver>)".
 * Backends without devices get one line saying why. Exit 0 when at least one device exists. */
static int cmd_devices(int argc, char **argv) {
  if (argc > 1) {
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
      printf("usage: dptrain devices\nLists every backend and device found, one per line.\n");
      return 0;
    }
    fprintf(stderr, "dptrain devices: unknown option '%s'\n", argv[1]);
    return 2;
  }
  int total = 0;
  for (int k = 0; k < DPT_BACKEND_KIND_COUNT; ++k) {
    dpt_backend_kind kind = (dpt_backend_kind)k;
    const char *name = dpt_backend_kind_name(kind);
    if (!dpt_backend_compiled(kind)) {
      printf("%-9s -  not compiled into this build\n", name);
      continue;
    }
    int count = 0;
    dpt_clear_error();
    dpt_status st = dpt_device_count(kind, &count);
    if (st != DPT_OK) {
      printf("%-9s -  error: %s: %s\n", name, dpt_status_str(st), dpt_last_error());
      continue;
    }
    if (count == 0) {
      const char *why = dpt_last_error();
      printf("%-9s -  no device%s%s\n", name, *why ? ": " : "", why);
      continue;
    }
    for (int i = 0; i < count; ++i) {
      dpt_device_info info;
      st = dpt_device_get_info(kind, i, &info);
      if (st != DPT_OK) {
        printf("%s:%-*d error: %s: %s\n", name, (int)(8 - strlen(name)), i, dpt_status_str(st),
               dpt_last_error());
        continue;
      }
      printf("%s:%-*d %-15s %s  (%s, %.1f GiB, %s)\n", name, (int)(8 - strlen(name)), i,
             dpt_device_type_name(info.type), info.name, info.vendor,
             (double)info.memory_bytes / (1024.0 * 1024.0 * 1024.0), info.driver);
      ++total;
    }
  }
  return total > 0 ? 0 : 1;
}

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
    usage(stderr);
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
  if (!strcmp(cmd, "devices")) return cmd_devices(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    printf("dptrain %s\n", dpt_version());
    return 0;
  }
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "dptrain: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
