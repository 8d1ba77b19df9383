/* Data-parallel training of an MLP on Fashion-MNIST through the public C API.
 *
 *   example_train_fashion_mnist [DATA_DIR] [REPLICAS]
 *
 * Runs REPLICAS replicas (default 2) as threads of this process on the CPU backend; under
 * mpirun, pass REPLICAS 0 to run one replica per rank instead. */
#include <stdio.h>
#include <stdlib.h>

#include <dptrain/dptrain.h>

static void report(const dpt_train_report *r, void *user) {
  (void)user;
  if (r->final)
    printf("done: %lld steps, %.0f samples/s, test accuracy %.4f\n", (long long)r->steps,
           r->samples_per_sec, r->test_accuracy);
  else
    printf("epoch %lld: loss %.4f, test accuracy %.4f\n", (long long)r->epoch, r->train_loss,
           r->test_accuracy);
}

static int check(dpt_status st, const char *what) {
  if (st == DPT_OK) return 0;
  fprintf(stderr, "%s: %s: %s\n", what, dpt_status_str(st), dpt_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  int replicas = argc > 2 ? atoi(argv[2]) : 2;

  dpt_dataset *train = NULL, *test = NULL;
  if (check(dpt_dataset_load_dir(dir, "train", 10, &train), "training set") ||
      check(dpt_dataset_load_dir(dir, "test", 10, &test), "test set"))
    return 1;

  dpt_train_config cfg;
  dpt_train_config_default(&cfg); /* SGD lr 0.05 momentum 0.9, global batch 256 */
  const size_t hidden[2] = {512, 256};
  dpt_model_spec_mlp(&cfg.model, 1, 28, 28, hidden, 2, 10); /* 784-512-256-10 */
  cfg.data.train = train;
  cfg.data.test = test;
  cfg.schedule.epochs = 2;
  cfg.callbacks.on_report = report;

  dpt_comm *comm = NULL; /* NULL: replicas are threads of this process */
  if (replicas == 0 && check(dpt_comm_create_mpi(NULL, &comm), "MPI")) return 1;
  cfg.devices.replicas = comm ? 1 : replicas;

  int rc = check(dpt_train(&cfg, comm, NULL), "training");
  dpt_comm_destroy(comm);
  dpt_dataset_destroy(train);
  dpt_dataset_destroy(test);
  return rc;
}
