/* `dptrain data images`: a folder of images, one subfolder per class, as a safetensors tensor
 * data set that `dptrain train --data` reads (docs/training.md, *Image folders*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "tools/prep/images/images.h"

typedef struct images_opts {
  const char *dir, *out;
  size_t rows, cols;
  int channels, stop;
} images_opts;

/* "H" or "HxW", each 1 .. 4096. */
static int parse_size(void *p, const char *v) {
  images_opts *o = p;
  char *end;
  const long h = strtol(v, &end, 10);
  long w = h;
  if (end != v && (*end == 'x' || *end == 'X')) {
    const char *rest = end + 1;
    w = strtol(rest, &end, 10);
    if (end == rest) return -1;
  }
  if (end == v || *end || h < 1 || w < 1 || h > 4096 || w > 4096) return -1;
  o->rows = (size_t)h;
  o->cols = (size_t)w;
  return 0;
}

static int parse_channels(void *p, const char *v) {
  images_opts *o = p;
  if (!strcmp(v, "1") || !strcmp(v, "3") || !strcmp(v, "4")) {
    o->channels = v[0] - '0';
    return 0;
  }
  return -1;
}

static int parse_on_bad(void *p, const char *v) {
  images_opts *o = p;
  if (strcmp(v, "skip") && strcmp(v, "stop")) return -1;
  o->stop = !strcmp(v, "stop");
  return 0;
}

#define OPT_TARGET images_opts

static const dpt_opt images_options[] = {
    {"--size", "H[xW]", "the size of every image (H: square), 1 .. 4096 a side",
     CUSTOM(parse_size)},
    {"--out", "FILE", "the safetensors file written", STRING(out)},
    {"--channels", "C",
     "1 (grayscale, PIL's convert(\"L\") weights), 3 (RGB, alpha dropped)\n"
     "or 4 (RGBA); default 3",
     CUSTOM(parse_channels)},
    {"--on-bad-image", "skip|stop",
     "a corrupt, truncated or unreadable image: named on stderr, then\n"
     "left out (skip, the default) or the conversion fails (stop)",
     CUSTOM(parse_on_bad)},
};

#undef OPT_TARGET

static const dpt_opt_cmd images_cmd = {
    "dptrain data images",
    "usage: dptrain data images DIR --size H[xW] --out FILE.safetensors [options]\n"
    "\n"
    "An image folder as torchvision's ImageFolder reads it (a class per subfolder, classes\n"
    "and files sorted by name in byte order; .jpg, .jpeg, .png) to a tensor data set: x\n"
    "uint8 [N, C, H, W], y int64 [N], the class names in the metadata. Each image is scaled\n"
    "to cover H x W (area averaging to shrink, bilinear to enlarge), then its center cut\n"
    "out, as Resize + CenterCrop. Train on it with dptrain train --data FILE.safetensors.\n",
    images_options,
    sizeof images_options / sizeof images_options[0],
    0,
};

const dpt_opt_cmd *dpt_data_images_options(void) {
  return &images_cmd;
}

static int take_dir(void *p, const char *arg) {
  images_opts *o = p;
  if (o->dir) return -1;
  o->dir = arg;
  return 0;
}

int dpt_cmd_data_images(int argc, char **argv) {
  images_opts io = {.channels = 3};
  const int rc = dpt_opt_parse(&images_cmd, &io, argc, argv, NULL, take_dir);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  if (!io.dir) return dpt_opt_usage_error(&images_cmd, "an image folder DIR is needed");
  if (!io.rows) return dpt_opt_usage_error(&images_cmd, "--size H[xW] is needed");
  if (!io.out) return dpt_opt_usage_error(&images_cmd, "--out FILE is needed");
  const dpt_image_folder_options o = {.dir = io.dir,
                                      .out = io.out,
                                      .rows = io.rows,
                                      .cols = io.cols,
                                      .channels = io.channels,
                                      .stop_on_bad = io.stop,
                                      .log = stderr,
                                      .prefix = images_cmd.name};
  dpt_image_folder_result r;
  const double t0 = dpt_now();
  const dpt_status st = dpt_image_folder_convert(&o, &r);
  if (st != DPT_OK) {
    fprintf(stderr, "%s: %s: %s\n", images_cmd.name, dpt_status_str(st), dpt_last_error());
    return 1;
  }
  printf("converted %zu images of %zu classes (%zux%zu, %d channel%s) into %s in %.2f s; "
         "%zu skipped, %zu other files ignored\n",
         r.converted, r.classes, io.rows, io.cols, io.channels, io.channels == 1 ? "" : "s", io.out,
         dpt_now() - t0, r.skipped, r.ignored);
  return 0;
}
