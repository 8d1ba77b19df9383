/* Image folders made into a tensor data set for `dptrain data images`: JPEG and PNG decoding
 * (decode.c, through libturbojpeg and libspng), the fit to a fixed size (resize.c) and the folder
 * walk that writes the safetensors file (folder.c). The library only reads the result
 * (dpt_dataset_load_safetensors). */
#ifndef DPTRAIN_TOOLS_PREP_IMAGES_H
#define DPTRAIN_TOOLS_PREP_IMAGES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dptrain/status.h"

/* Largest width or height decoded, and the largest decoded image in bytes. */
#define DPT_IMAGE_MAX_SIDE  32768u
#define DPT_IMAGE_MAX_BYTES (UINT64_C(1) << 30)

/* 1 when the decoders were built in (libturbojpeg and libspng found), else 0. */
int dpt_images_supported(void);

/* A decoded image: rows of width RGBA pixels, 8 bits a channel, interleaved. */
typedef struct dpt_image {
  uint8_t *rgba; /* malloc'd, [height][width][4] */
  size_t width, height;
  int warned; /* the JPEG decoder warned about data it got past (extraneous bytes) */
} dpt_image;

/* Decodes a JPEG or PNG file's bytes (told apart by their signature, not the file name) into
 * *out: grayscale replicated into R, G, B; alpha 255 where the image has none (a PNG's tRNS
 * applied). DPT_ERR_BAD_FORMAT with the reason (not JPEG or PNG, truncated, the decoder's
 * message, too large); DPT_ERR_UNSUPPORTED when built without the decoders;
 * DPT_ERR_OUT_OF_MEMORY. On failure out->rgba is NULL. */
dpt_status dpt_image_decode(const uint8_t *bytes, size_t size, dpt_image *out);

/* Frees img's pixels (img itself is the caller's); NULL does nothing. */
void dpt_image_free(dpt_image *img);

/* img fit to rows x cols as torchvision's Resize + CenterCrop: scaled so it covers rows x cols
 * (for a square size: the shorter side becomes the size, the longer one its scaled length
 * truncated), then the center cut out (offsets rounded half to even, as Python's round). Each
 * axis is shrunk by area averaging (every output pixel the mean of the input area it covers) or
 * enlarged bilinearly (pixel centers aligned, edges clamped); the same size copies. channels: 1
 * (luma, ITU-R 601-2 as PIL's convert("L")), 3 (RGB: alpha dropped, as convert("RGB")) or 4
 * (RGBA). dst: [channels][rows][cols]. DPT_ERR_OUT_OF_MEMORY, DPT_ERR_INVALID_ARG. */
dpt_status dpt_image_fit(const dpt_image *img, int channels, size_t rows, size_t cols,
                         uint8_t *dst);

/* What dpt_image_folder_convert does. */
typedef struct dpt_image_folder_options {
  const char *dir;    /* one subfolder per class */
  const char *out;    /* the .safetensors file written */
  size_t rows, cols;  /* the size every image is fit to */
  int channels;       /* 1, 3 or 4 */
  int stop_on_bad;    /* 1: a bad image fails the conversion; 0: it is skipped */
  FILE *log;          /* one line per bad image, progress at most once a second (NULL: none) */
  const char *prefix; /* the start of each log line ("dptrain data images") */
} dpt_image_folder_options;

typedef struct dpt_image_folder_result {
  size_t converted, skipped; /* images written, and bad images left out */
  size_t ignored;            /* files with other extensions, not read */
  size_t classes;
} dpt_image_folder_result;

/* Reads o->dir as torchvision's ImageFolder does: the classes are its subfolders (symbolic links
 * followed), sorted by name in byte order, label i the i-th; a class's images are the files
 * named *.jpg, *.jpeg or *.png (any case) anywhere below its folder, in the order of Python's
 * sorted(os.walk()) (by folder path, then by name); other files are ignored. Each image is
 * decoded, fit (dpt_image_fit) and written to o->out as safetensors: x uint8 [N, C, H, W],
 * y int64 [N], and metadata "classes" (a JSON array of the names, in label order), "channels"
 * and "size". A bad image is a line "PREFIX: PATH: REASON" on o->log, then skipped, or with
 * stop_on_bad the conversion fails with DPT_ERR_BAD_FORMAT naming it. Errors: DPT_ERR_IO (the
 * folder, a file, the output), DPT_ERR_BAD_FORMAT (no class folder, a class without images, no
 * image converted), DPT_ERR_UNSUPPORTED (no decoders), DPT_ERR_OUT_OF_MEMORY. */
dpt_status dpt_image_folder_convert(const dpt_image_folder_options *o, dpt_image_folder_result *r);

#endif
