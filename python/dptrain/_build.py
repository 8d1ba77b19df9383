"""The cffi builder of dptrain's extension module (API mode).

The declarations below are checked by the C compiler against the installed header
<dptrain/dptrain.h>: every struct is declared with "...;" (only the fields Python uses, at the
offsets and sizes the compiler gives them) and every enum's values come from the header, so the
module cannot drift from the library it is compiled for. setup.py (pip) and python/CMakeLists.txt
(CMake) both build from this file: `python3 _build.py OUT.c` writes the C source.
"""

import os
import sys

import cffi

CDEF = r"""
/* status.h */
typedef enum dpt_status { DPT_OK, DPT_ERR_INVALID_ARG, DPT_ERR_OUT_OF_MEMORY, DPT_ERR_DEVICE,
  DPT_ERR_KERNEL_BUILD, DPT_ERR_UNSUPPORTED, DPT_ERR_COMM, DPT_ERR_MISMATCH, DPT_ERR_TIMEOUT,
  DPT_ERR_IO, DPT_ERR_BAD_FORMAT, DPT_ERR_NONFINITE, DPT_ERR_PEER, DPT_ERR_INTERRUPTED, ...
} dpt_status;
const char *dpt_status_str(dpt_status status);
const char *dpt_status_name(dpt_status status);
const char *dpt_last_error(void);
void dpt_clear_error(void);
const char *dpt_version(void);
uint64_t dpt_fingerprint(const void *data, size_t bytes);

/* device.h */
typedef enum dpt_backend_kind { DPT_BACKEND_CPU, DPT_BACKEND_OPENCL, DPT_BACKEND_VULKAN,
  DPT_BACKEND_KIND_COUNT, ... } dpt_backend_kind;
typedef enum dpt_device_type { DPT_DEVICE_CPU, ... } dpt_device_type;
typedef struct dpt_backend dpt_backend;
typedef struct dpt_device_info {
  dpt_backend_kind backend; int index; dpt_device_type type;
  char name[128]; char vendor[64]; char driver[128]; uint64_t memory_bytes; ...;
} dpt_device_info;
const char *dpt_backend_kind_name(dpt_backend_kind kind);
dpt_status dpt_backend_kind_parse(const char *name, dpt_backend_kind *out);
const char *dpt_device_type_name(dpt_device_type type);
int dpt_backend_compiled(dpt_backend_kind kind);
dpt_status dpt_device_count(dpt_backend_kind kind, int *count);
dpt_status dpt_device_get_info(dpt_backend_kind kind, int index, dpt_device_info *out);
dpt_status dpt_backend_create(dpt_backend_kind kind, int device, dpt_backend **out);
void dpt_backend_destroy(dpt_backend *backend);

/* communicator.h */
typedef struct dpt_comm dpt_comm;
typedef enum dpt_comm_dtype { DPT_COMM_F32, DPT_COMM_F16, DPT_COMM_BF16, ... } dpt_comm_dtype;
int dpt_comm_mpi_compiled(void);
int dpt_comm_mpi_launched(void);
dpt_status dpt_comm_check_launch(const dpt_comm *comm);
dpt_status dpt_comm_create_mpi(const void *mpi_comm, dpt_comm **out);
void dpt_comm_destroy(dpt_comm *comm);
int dpt_comm_rank(const dpt_comm *comm);
int dpt_comm_size(const dpt_comm *comm);

/* model.h */
#define DPT_MODEL_MAX_LAYERS ...
#define DPT_LAYER_NAME_MAX ...
#define DPT_LAYER_MAX_INPUTS ...
typedef enum dpt_layer_kind { DPT_LAYER_LINEAR, DPT_LAYER_KIND_COUNT, ... } dpt_layer_kind;
typedef struct dpt_layer_spec {
  dpt_layer_kind kind; size_t size; size_t kernel; size_t stride; size_t padding; int no_bias;
  float p; int num_inputs; int inputs[2]; char name[48]; ...;
} dpt_layer_spec;
typedef struct dpt_model_spec {
  size_t in_c, in_h, in_w; size_t num_classes; size_t seq_len; size_t num_layers;
  dpt_layer_spec layers[...]; ...;
} dpt_model_spec;
const char *dpt_layer_kind_name(dpt_layer_kind kind);
dpt_status dpt_model_spec_mlp(dpt_model_spec *spec, size_t c, size_t h, size_t w,
                              const size_t *hidden, size_t num_hidden, size_t num_classes);
dpt_status dpt_model_spec_cnn(dpt_model_spec *spec, size_t c, size_t h, size_t w, size_t c1,
                              size_t c2, size_t num_classes);
dpt_status dpt_model_spec_resnet(dpt_model_spec *spec, size_t c, size_t h, size_t w,
                                 size_t depth, size_t num_classes);
dpt_status dpt_model_spec_load_json(const char *path, size_t c, size_t h, size_t w,
                                    size_t num_classes, dpt_model_spec *spec);
dpt_status dpt_model_spec_parse_json(const char *text, const char *origin, dpt_model_spec *spec);
dpt_status dpt_model_spec_to_json(const dpt_model_spec *spec, char **out);
dpt_status dpt_model_spec_from_weights(const char *path, dpt_model_spec *spec);
typedef struct dpt_model dpt_model;
typedef struct dpt_tensor_info {
  const char *name; int ndim; int64_t shape[4]; size_t offset; size_t count; ...;
} dpt_tensor_info;
dpt_status dpt_model_create(dpt_backend *backend, const dpt_model_spec *spec, size_t max_batch,
                            dpt_model **out);
void dpt_model_destroy(dpt_model *model);
dpt_status dpt_model_init(dpt_model *model, uint64_t seed);
size_t dpt_model_num_tensors(const dpt_model *model);
dpt_status dpt_model_tensor(const dpt_model *model, size_t index, dpt_tensor_info *out);
size_t dpt_model_num_buffers(const dpt_model *model);
dpt_status dpt_model_buffer_info(const dpt_model *model, size_t index, dpt_tensor_info *out);
size_t dpt_model_num_params(const dpt_model *model);
size_t dpt_model_input_size(const dpt_model *model);
size_t dpt_model_num_classes(const dpt_model *model);
size_t dpt_model_labels_per_sample(const dpt_model *model);
size_t dpt_model_state_size(const dpt_model *model);
dpt_status dpt_model_get_state(const dpt_model *model, float *host);
dpt_status dpt_model_set_state(dpt_model *model, const float *host);
dpt_status dpt_model_save_params(const dpt_model *model, const float *host, const char *path);
dpt_status dpt_model_load_params(const dpt_model *model, const char *path, float *host);
dpt_status dpt_model_save_params_meta(const dpt_model *model, const float *host,
                                      const char *path, const char *const *extra_kv);
dpt_status dpt_model_predict(dpt_model *model, const float *x, size_t batch, float *logits);

/* safetensors.h: a weights file's metadata */
typedef struct dpt_safetensors dpt_safetensors;
dpt_status dpt_safetensors_open(const char *path, dpt_safetensors **out);
void dpt_safetensors_close(dpt_safetensors *st);
const char *dpt_safetensors_metadata(const dpt_safetensors *st, const char *key);

/* data.h */
typedef struct dpt_dataset dpt_dataset;
dpt_status dpt_dataset_load_idx(const char *images_path, const char *labels_path,
                                int num_classes, dpt_dataset **out);
dpt_status dpt_dataset_load_dir(const char *dir, const char *split, int num_classes,
                                dpt_dataset **out);
dpt_status dpt_dataset_from_memory(const uint8_t *pixels, const int32_t *labels, size_t count,
                                   size_t rows, size_t cols, int num_classes, dpt_dataset **out);
typedef enum dpt_sample_type { DPT_SAMPLES_U8, DPT_SAMPLES_F32, ... } dpt_sample_type;
dpt_status dpt_dataset_wrap(const void *samples, dpt_sample_type type, const int32_t *labels,
                            size_t count, size_t channels, size_t rows, size_t cols,
                            int num_classes, dpt_dataset **out);
dpt_status dpt_dataset_load_safetensors(const char *path, int num_classes, dpt_dataset **out);
void dpt_dataset_destroy(dpt_dataset *ds);
size_t dpt_dataset_count(const dpt_dataset *ds);
size_t dpt_dataset_dim(const dpt_dataset *ds);
size_t dpt_dataset_channels(const dpt_dataset *ds);
size_t dpt_dataset_rows(const dpt_dataset *ds);
size_t dpt_dataset_cols(const dpt_dataset *ds);
int dpt_dataset_num_classes(const dpt_dataset *ds);
dpt_status dpt_dataset_gather(const dpt_dataset *ds, const uint64_t *indices, size_t count,
                              float *x, int32_t *labels);
typedef struct dpt_data_transform {
  size_t channels; const float *mean; const float *std; size_t crop_pad; int hflip;
  uint64_t seed; ...;
} dpt_data_transform;
size_t dpt_sampler_num_batches(size_t n, size_t global_batch, int keep_last);

/* optim.h */
typedef enum dpt_optim_kind { DPT_OPTIM_SGD, DPT_OPTIM_KIND_COUNT, ... } dpt_optim_kind;
typedef enum dpt_schedule_kind { DPT_SCHEDULE_CONSTANT, DPT_SCHEDULE_STEP, DPT_SCHEDULE_COSINE,
  DPT_SCHEDULE_LINEAR, DPT_SCHEDULE_KIND_COUNT, ... } dpt_schedule_kind;
const char *dpt_optim_kind_name(dpt_optim_kind kind);
const char *dpt_schedule_kind_name(dpt_schedule_kind kind);
typedef struct dpt_optim_config {
  dpt_optim_kind kind; float lr; float momentum; int nesterov; float weight_decay;
  float beta1, beta2, eps; dpt_schedule_kind schedule; int64_t warmup_steps; int64_t step_size;
  float gamma; int64_t total_steps; float min_lr; float clip_norm; int decay_weights_only;
  const char *no_decay; ...;
} dpt_optim_config;
void dpt_optim_config_default(dpt_optim_config *cfg, dpt_optim_kind kind);

/* train.h */
typedef struct dpt_train_report {
  int final; int64_t epoch; int64_t steps; int64_t skipped_steps;
  double train_loss, test_loss, test_accuracy, test_perplexity, test_auc, test_logloss;
  size_t labels_per_sample; double samples_per_sec; double seconds; int ranks; int replicas;
  uint64_t param_hash; const char *backend;
  double compute_seconds, allreduce_seconds, optimizer_seconds;
  double exchange_seconds, exposed_seconds, imbalance_seconds;
  int64_t rollbacks; int64_t checkpoints; double checkpoint_seconds; const char *checkpoint;
  size_t num_params; size_t activation_bytes; ...;
} dpt_train_report;
typedef enum dpt_nonfinite_policy { DPT_NONFINITE_STOP, DPT_NONFINITE_SKIP,
  DPT_NONFINITE_ROLLBACK, ... } dpt_nonfinite_policy;
typedef enum dpt_split_mode { DPT_SPLIT_EVEN, DPT_SPLIT_PROPORTIONAL, ... } dpt_split_mode;
typedef void (*dpt_train_report_fn)(const dpt_train_report *report, void *user);
typedef void (*dpt_train_progress_fn)(int64_t epoch, size_t batch, size_t batches, double loss,
                                      void *user);
typedef void (*dpt_train_log_fn)(const char *line, void *user);
typedef struct dpt_train_devices {
  dpt_backend_kind backend; int device; int replicas; dpt_split_mode split;
  int64_t split_every; ...;
} dpt_train_devices;
typedef struct dpt_train_data {
  const dpt_dataset *train; const dpt_dataset *test; dpt_data_transform transform; ...;
} dpt_train_data;
typedef struct dpt_train_schedule {
  size_t global_batch; int64_t epochs; int64_t max_steps; uint64_t seed; int shuffle;
  int keep_last; size_t accumulate; ...;
} dpt_train_schedule;
#define DPT_BUCKET_AUTO ...
typedef struct dpt_train_exchange {
  size_t bucket_bytes; int bucket_whole_update; dpt_comm_dtype grad_dtype;
  int grad_error_feedback; int full_optimizer_step; int sync_bn; ...;
} dpt_train_exchange;
typedef struct dpt_train_checkpoints {
  const char *checkpoint_dir; int64_t checkpoint_every; double checkpoint_minutes;
  int keep_checkpoints; int resume; ...;
} dpt_train_checkpoints;
typedef struct dpt_train_checks {
  int64_t check_every; dpt_nonfinite_policy on_nonfinite; int64_t max_skipped;
  int max_rollbacks; double rollback_lr_scale; ...;
} dpt_train_checks;
typedef struct dpt_train_callbacks {
  dpt_train_report_fn on_report; dpt_train_progress_fn on_progress; dpt_train_log_fn on_log;
  void *user; ...;
} dpt_train_callbacks;
typedef struct dpt_train_config {
  size_t size; dpt_model_spec model; const float *init_params; float *final_params;
  dpt_optim_config optim; dpt_train_devices devices; dpt_train_data data;
  dpt_train_schedule schedule; dpt_train_exchange exchange; dpt_train_checkpoints checkpoints;
  dpt_train_checks checks; dpt_train_callbacks callbacks; const char *trace;
  const char *log_dir; ...;
} dpt_train_config;
dpt_status dpt_train_config_default(dpt_train_config *cfg);
dpt_status dpt_train(const dpt_train_config *cfg, dpt_comm *comm, dpt_train_report *final);

/* the module's own (SOURCE below) */
typedef struct { dpt_train_config cfg; ...; } dpt_py_run;
void dpt_py_arm_stop(dpt_py_run *run);
void dpt_py_request_stop(dpt_py_run *run);
void dpt_py_catch_signals(dpt_py_run *run);
int dpt_py_release_signals(dpt_py_run *run);
void free(void *p);

extern "Python" void dpt_py_on_report(const dpt_train_report *, void *);
extern "Python" void dpt_py_on_progress(int64_t, size_t, size_t, double, void *);
extern "Python" void dpt_py_on_log(const char *, void *);
"""

# The C side: the library's headers, and the stop flag a failing callback raises to end the run
# after its step (dpt_train_checks.stop_request points to a volatile sig_atomic_t, which the
# declarations above do not spell), kept next to the configuration it belongs to.
SOURCE = r"""
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <dptrain/dptrain.h>
#include <dptrain/fingerprint.h>
#include <dptrain/safetensors.h>

typedef struct {
  dpt_train_config cfg;
  volatile sig_atomic_t stop;
} dpt_py_run;

static void dpt_py_arm_stop(dpt_py_run *run) {
  run->stop = 0;
  run->cfg.checks.stop_request = &run->stop;
}

static void dpt_py_request_stop(dpt_py_run *run) {
  run->stop = 1;
}

/* While the main thread waits in dpt_train, Python's own SIGINT handler cannot run: SIGINT and
 * SIGTERM set the run's stop flag instead (every replica stops after its step, as `dptrain
 * train` does), and the previous handlers come back afterwards. Returns the signal, or 0. */
static volatile sig_atomic_t *dpt_py_signal_flag;
static struct sigaction dpt_py_old_int, dpt_py_old_term;

static void dpt_py_on_signal(int sig) {
  if (dpt_py_signal_flag) *dpt_py_signal_flag = sig;
}

static void dpt_py_catch_signals(dpt_py_run *run) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = dpt_py_on_signal;
  sigemptyset(&sa.sa_mask);
  dpt_py_signal_flag = &run->stop;
  sigaction(SIGINT, &sa, &dpt_py_old_int);
  sigaction(SIGTERM, &sa, &dpt_py_old_term);
}

static int dpt_py_release_signals(dpt_py_run *run) {
  sigaction(SIGINT, &dpt_py_old_int, NULL);
  sigaction(SIGTERM, &dpt_py_old_term, NULL);
  dpt_py_signal_flag = NULL;
  return run->stop == SIGINT || run->stop == SIGTERM ? (int)run->stop : 0;
}
"""


def _split_flags(text):
    return [t for t in text.split() if t]


def _pkg_config():
    """The library's -I and -L from pkg-config (an installed dptrain), or empty lists."""
    import subprocess

    try:
        cflags = subprocess.run(["pkg-config", "--cflags-only-I", "dptrain"], check=True,
                                capture_output=True, text=True).stdout
        libs = subprocess.run(["pkg-config", "--libs-only-L", "dptrain"], check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return [], []
    return ([f[2:] for f in _split_flags(cflags) if f.startswith("-I")],
            [f[2:] for f in _split_flags(libs) if f.startswith("-L")])


def make_ffi():
    """The builder: headers and library from DPTRAIN_INCLUDE_DIR / DPTRAIN_LIBRARY_DIR when
    set, else pkg-config's dptrain, else the source tree around this file (include/)."""
    inc, lib = _pkg_config()
    if os.environ.get("DPTRAIN_INCLUDE_DIR"):
        inc = [os.environ["DPTRAIN_INCLUDE_DIR"]]
    if os.environ.get("DPTRAIN_LIBRARY_DIR"):
        lib = [os.environ["DPTRAIN_LIBRARY_DIR"]]
    tree = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include")
    if not inc and os.path.exists(os.path.join(tree, "dptrain", "dptrain.h")):
        inc = [os.path.normpath(tree)]
    system = {"/usr/lib", "/usr/lib64", "/lib", "/usr/lib/x86_64-linux-gnu"}
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source("dptrain._dptrain_cffi", SOURCE, libraries=["dptrain"], include_dirs=inc,
                   library_dirs=lib, runtime_library_dirs=[d for d in lib if d not in system])
    return ffi


ffi = make_ffi()

if __name__ == "__main__":
    # CMake: write the C source of the extension module to argv[1].
    if len(sys.argv) != 2:
        sys.exit("usage: _build.py OUT.c")
    ffi.emit_c_code(sys.argv[1])
