/* A small ResNet built layer by layer with the model builder, trained data-parallel on
 * Fashion-MNIST through the public C API, then asked for the logits of a few test images.
 *
 *   example_train_resnet [DATA_DIR] [STEPS] [REPLICAS]
 *
 * STEPS (default 100) global batches of 64 on REPLICAS (default 2) CPU replicas, then the
 * first 1000 test images are evaluated (a ResNet on the CPU is slow: about 40 samples/s to
 * train and 110/s to evaluate on one core), the weights saved with their model description
 * (resnet.safetensors: `dptrain eval --weights resnet.safetensors` reads it) and the
 * predictions for the first 8 test images printed.
 *
 * The network: conv3x3(16)-bn-relu, then one basic block per stage (16, 32 and 64 channels; the
 * later stages halve the image with a stride-2 convolution and project the shortcut with a
 * strided 1x1 conv + bn), global average pooling and a linear layer: what
 * dpt_model_spec_resnet builds for depth 8, spelled out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dptrain/dptrain.h>

static int check(dpt_status st, const char *what) {
  if (st == DPT_OK) return 0;
  fprintf(stderr, "%s: %s: %s\n", what, dpt_status_str(st), dpt_last_error());
  return 1;
}

/* Appends one layer named `name` taking inputs in[0..n) (n 0: the layer before); its index. */
static int add(dpt_model_spec *s, dpt_layer_spec l, const char *name, int n, int in0, int in1) {
  int index = -1;
  snprintf(l.name, sizeof l.name, "%s", name);
  l.num_inputs = n;
  l.inputs[0] = in0;
  l.inputs[1] = in1;
  if (check(dpt_model_spec_add(s, &l, &index), name)) exit(1);
  return index;
}

/* conv3x3 (no bias, as batch norm follows) and batch norm, named <prefix>conv<k>/bn<k>. */
static int conv_bn(dpt_model_spec *s, const char *prefix, const char *conv_name,
                   const char *bn_name, int in, size_t out, size_t kernel, size_t stride) {
  char name[DPT_LAYER_NAME_MAX];
  dpt_layer_spec conv = {.kind = DPT_LAYER_CONV2D,
                         .size = out,
                         .kernel = kernel,
                         .stride = stride,
                         .padding = kernel / 2,
                         .no_bias = 1};
  dpt_layer_spec bn = {.kind = DPT_LAYER_BATCHNORM2D};
  snprintf(name, sizeof name, "%s%s", prefix, conv_name);
  add(s, conv, name, 1, in, 0);
  snprintf(name, sizeof name, "%s%s", prefix, bn_name);
  return add(s, bn, name, 0, 0, 0);
}

/* A basic block: relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)); returns its output's index. */
static int basic_block(dpt_model_spec *s, int stage, int in, size_t in_c, size_t out,
                       size_t stride) {
  char prefix[32], name[DPT_LAYER_NAME_MAX];
  snprintf(prefix, sizeof prefix, "layer%d.0.", stage);
  const dpt_layer_spec relu = {.kind = DPT_LAYER_RELU}, sum = {.kind = DPT_LAYER_ADD};
  conv_bn(s, prefix, "conv1", "bn1", in, out, 3, stride);
  snprintf(name, sizeof name, "%srelu1", prefix);
  int r1 = add(s, relu, name, 0, 0, 0);
  int main_path = conv_bn(s, prefix, "conv2", "bn2", r1, out, 3, 1);
  int shortcut = in; /* the identity, or a projection where the shape changes */
  if (stride != 1 || in_c != out)
    shortcut = conv_bn(s, prefix, "shortcut.0", "shortcut.1", in, out, 1, stride);
  snprintf(name, sizeof name, "%sadd", prefix);
  add(s, sum, name, 2, main_path, shortcut);
  snprintf(name, sizeof name, "%srelu2", prefix);
  return add(s, relu, name, 0, 0, 0);
}

static void build_resnet(dpt_model_spec *s, size_t rows, size_t cols, size_t classes) {
  if (check(dpt_model_spec_init(s, 1, rows, cols, classes), "spec")) exit(1);
  const dpt_layer_spec stem = {
      .kind = DPT_LAYER_CONV2D, .size = 16, .kernel = 3, .stride = 1, .padding = 1, .no_bias = 1};
  add(s, stem, "conv1", 0, 0, 0);
  add(s, (dpt_layer_spec){.kind = DPT_LAYER_BATCHNORM2D}, "bn1", 0, 0, 0);
  int x = add(s, (dpt_layer_spec){.kind = DPT_LAYER_RELU}, "relu", 0, 0, 0);
  x = basic_block(s, 1, x, 16, 16, 1);
  x = basic_block(s, 2, x, 16, 32, 2);
  basic_block(s, 3, x, 32, 64, 2);
  add(s, (dpt_layer_spec){.kind = DPT_LAYER_GLOBAL_AVGPOOL}, "avgpool", 0, 0, 0);
  add(s, (dpt_layer_spec){.kind = DPT_LAYER_FLATTEN}, "flatten", 0, 0, 0);
  add(s, (dpt_layer_spec){.kind = DPT_LAYER_LINEAR, .size = classes}, "fc", 0, 0, 0);
}

static void report(const dpt_train_report *r, void *user) {
  (void)user;
  if (r->final)
    printf("done: %lld steps, %.0f samples/s, %zu parameters, test accuracy %.4f "
           "(first 1000 test images)\n",
           (long long)r->steps, r->samples_per_sec, r->num_params, r->test_accuracy);
}

/* The first `n` samples of `ds` as a data set of their own. */
static dpt_status head(const dpt_dataset *ds, size_t n, dpt_dataset **out) {
  const size_t dim = dpt_dataset_dim(ds);
  uint64_t *idx = malloc(n * sizeof *idx);
  float *x = malloc(n * dim * sizeof *x);
  int32_t *y = malloc(n * sizeof *y);
  uint8_t *px = malloc(n * dim);
  dpt_status st = idx && x && y && px ? DPT_OK : DPT_ERR_OUT_OF_MEMORY;
  for (size_t i = 0; i < n && idx; ++i)
    idx[i] = i;
  if (st == DPT_OK) st = dpt_dataset_gather(ds, idx, n, x, y);
  for (size_t i = 0; st == DPT_OK && i < n * dim; ++i)
    px[i] = (uint8_t)(x[i] * 255.0f + 0.5f); /* gather gave pixel / 255 */
  if (st == DPT_OK)
    st = dpt_dataset_from_memory(px, y, n, dpt_dataset_rows(ds), dpt_dataset_cols(ds),
                                 dpt_dataset_num_classes(ds), out);
  free(idx);
  free(x);
  free(y);
  free(px);
  return st;
}

/* The trained weights on a CPU model: the logits of the first `n` test images. */
static int predict(const dpt_model_spec *spec, const float *state, const dpt_dataset *test,
                   size_t n) {
  dpt_backend *be = NULL;
  dpt_model *model = NULL;
  const size_t dim = dpt_dataset_dim(test), classes = spec->num_classes;
  float *hx = malloc(n * dim * sizeof *hx), *logits = malloc(n * classes * sizeof *logits);
  int32_t *labels = malloc(n * sizeof *labels);
  uint64_t idx[64];
  for (size_t i = 0; i < n; ++i)
    idx[i] = i;
  int rc = !hx || !logits || !labels || n > 64;
  rc = rc || check(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), "cpu backend") ||
       check(dpt_model_create(be, spec, n, &model), "model") ||
       check(dpt_model_set_state(model, state), "weights") ||
       check(dpt_model_save(model, "resnet.safetensors"), "resnet.safetensors") ||
       check(dpt_dataset_gather(test, idx, n, hx, labels), "test images") ||
       check(dpt_model_predict(model, hx, n, logits), "logits");
  for (size_t i = 0; i < n && !rc; ++i) {
    size_t best = 0;
    for (size_t j = 1; j < classes; ++j)
      if (logits[i * classes + j] > logits[i * classes + best]) best = j;
    printf("test image %zu: label %d, predicted %zu (logit %.3f)\n", i, labels[i], best,
           (double)logits[i * classes + best]);
  }
  dpt_model_destroy(model);
  dpt_backend_destroy(be);
  free(hx);
  free(logits);
  free(labels);
  return rc;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const long steps = argc > 2 ? atol(argv[2]) : 100;
  const int replicas = argc > 3 ? atoi(argv[3]) : 2;
  if (steps < 1 || replicas < 1) {
    fprintf(stderr, "usage: example_train_resnet [DATA_DIR] [STEPS >= 1] [REPLICAS >= 1]\n");
    return 2;
  }

  dpt_dataset *train = NULL, *full_test = NULL, *test = NULL;
  if (check(dpt_dataset_load_dir(dir, "train", 10, &train), "training set") ||
      check(dpt_dataset_load_dir(dir, "test", 10, &full_test), "test set") ||
      check(head(full_test, 1000, &test), "test subset"))
    return 1;

  dpt_train_config cfg;
  dpt_train_config_default(&cfg); /* SGD lr 0.05 momentum 0.9 */
  build_resnet(&cfg.model, dpt_dataset_rows(train), dpt_dataset_cols(train), 10);
  cfg.data.train = train;
  cfg.data.test = test;
  cfg.devices.replicas = replicas; /* threads of this process, each a CPU replica */
  cfg.schedule.global_batch = 64;
  cfg.schedule.max_steps = steps;
  cfg.callbacks.on_report = report;

  /* The final weights and batch norm statistics come back in final_params. */
  dpt_backend *be = NULL;
  dpt_model *sizer = NULL;
  int rc = check(dpt_backend_create(DPT_BACKEND_CPU, 0, &be), "cpu backend") ||
           check(dpt_model_create(be, &cfg.model, 1, &sizer), "model");
  float *state = rc ? NULL : malloc(dpt_model_state_size(sizer) * sizeof(float));
  dpt_model_destroy(sizer);
  dpt_backend_destroy(be);
  cfg.final_params = state;
  rc = rc || !state || check(dpt_train(&cfg, NULL, NULL), "training");
  rc = rc || predict(&cfg.model, state, full_test, 8);
  free(state);
  dpt_dataset_destroy(train);
  dpt_dataset_destroy(full_test);
  dpt_dataset_destroy(test);
  return rc;
}
