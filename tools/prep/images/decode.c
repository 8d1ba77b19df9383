/* JPEG and PNG decoding to RGBA through Debian's libturbojpeg (its TurboJPEG 2 API) and libspng;
 * without them (DPT_WITH_IMAGES undefined) every decode says the build lacks image support. */
#include "tools/prep/images/images.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#if defined(DPT_WITH_IMAGES)
#include <spng.h>
#include <turbojpeg.h>

int dpt_images_supported(void) {
  return 1;
}

/* Whether a width x height RGBA image is within the decoding limits. */
static dpt_status check_dims(size_t width, size_t height) {
  if (width == 0 || height == 0)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "an empty image (%zux%zu)", width, height);
  if (width > DPT_IMAGE_MAX_SIDE || height > DPT_IMAGE_MAX_SIDE ||
      (uint64_t)width * height * 4 > DPT_IMAGE_MAX_BYTES)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "too large (%zux%zu; at most %u a side and %llu MiB)",
                         width, height, DPT_IMAGE_MAX_SIDE,
                         (unsigned long long)(DPT_IMAGE_MAX_BYTES >> 20));
  return DPT_OK;
}

static dpt_status alloc_rgba(dpt_image *out) {
  out->rgba = malloc(out->width * out->height * 4);
  if (!out->rgba)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "out of memory for a %zux%zu image", out->width,
                         out->height);
  return DPT_OK;
}

/* The JPEG decoder's verdict on a failed call: a warning about the end of the data is a truncated
 * file; other warnings (extraneous bytes between markers) leave a whole image, as PIL reads it. */
static dpt_status jpeg_failed(tjhandle tj, dpt_image *out) {
  const char *why = tjGetErrorStr2(tj);
  if (tjGetErrorCode(tj) == TJERR_WARNING && !strstr(why, "Premature end")) {
    out->warned = 1;
    return DPT_OK;
  }
  if (strstr(why, "Premature end"))
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "truncated JPEG: %s", why);
  return dpt_set_error(DPT_ERR_BAD_FORMAT, "bad JPEG: %s", why);
}

static dpt_status decode_jpeg(const uint8_t *bytes, size_t size, dpt_image *out) {
  tjhandle tj = tjInitDecompress();
  if (!tj)
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "the JPEG decoder: %s", tjGetErrorStr2(NULL));
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  dpt_status s = DPT_OK;
  if (tjDecompressHeader3(tj, bytes, (unsigned long)size, &w, &h, &subsamp, &colorspace) != 0)
    s = dpt_set_error(DPT_ERR_BAD_FORMAT, "bad JPEG header: %s", tjGetErrorStr2(tj));
  if (s == DPT_OK) {
    out->width = (size_t)w;
    out->height = (size_t)h;
    s = check_dims(out->width, out->height);
  }
  if (s == DPT_OK) s = alloc_rgba(out);
  if (s == DPT_OK &&
      tjDecompress2(tj, bytes, (unsigned long)size, out->rgba, w, w * 4, h, TJPF_RGBA, 0) != 0)
    s = jpeg_failed(tj, out);
  tjDestroy(tj);
  return s;
}

static dpt_status png_error(int rc) {
  if (rc == SPNG_EOF || rc == SPNG_IO_EOF)
    return dpt_set_error(DPT_ERR_BAD_FORMAT, "truncated PNG: %s", spng_strerror(rc));
  return dpt_set_error(DPT_ERR_BAD_FORMAT, "bad PNG: %s", spng_strerror(rc));
}

static dpt_status decode_png(const uint8_t *bytes, size_t size, dpt_image *out) {
  spng_ctx *ctx = spng_ctx_new(0);
  if (!ctx) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "the PNG decoder: out of memory");
  struct spng_ihdr ihdr;
  size_t need = 0;
  int rc = spng_set_image_limits(ctx, DPT_IMAGE_MAX_SIDE, DPT_IMAGE_MAX_SIDE);
  if (!rc) rc = spng_set_png_buffer(ctx, bytes, size);
  if (!rc) rc = spng_get_ihdr(ctx, &ihdr);
  dpt_status s = rc ? png_error(rc) : DPT_OK;
  if (s == DPT_OK) {
    out->width = ihdr.width;
    out->height = ihdr.height;
    s = check_dims(out->width, out->height);
  }
  if (s == DPT_OK && (rc = spng_decoded_image_size(ctx, SPNG_FMT_RGBA8, &need)) != 0)
    s = png_error(rc);
  if (s == DPT_OK) s = alloc_rgba(out);
  if (s == DPT_OK && need != out->width * out->height * 4)
    s = dpt_set_error(DPT_ERR_BAD_FORMAT, "bad PNG: decoded size %zu bytes for %zux%zu", need,
                      out->width, out->height);
  if (s == DPT_OK &&
      (rc = spng_decode_image(ctx, out->rgba, need, SPNG_FMT_RGBA8, SPNG_DECODE_TRNS)) != 0)
    s = png_error(rc);
  spng_ctx_free(ctx);
  return s;
}

dpt_status dpt_image_decode(const uint8_t *bytes, size_t size, dpt_image *out) {
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  memset(out, 0, sizeof *out);
  dpt_status s;
  if (size >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff)
    s = decode_jpeg(bytes, size, out);
  else if (size >= 8 && memcmp(bytes, png_sig, 8) == 0)
    s = decode_png(bytes, size, out);
  else
    s = dpt_set_error(DPT_ERR_BAD_FORMAT, "neither JPEG nor PNG (%zu bytes)", size);
  if (s != DPT_OK) dpt_image_free(out);
  return s;
}

#else

int dpt_images_supported(void) {
  return 0;
}

dpt_status dpt_image_decode(const uint8_t *bytes, size_t size, dpt_image *out) {
  (void)bytes;
  (void)size;
  memset(out, 0, sizeof *out);
  return dpt_set_error(DPT_ERR_UNSUPPORTED,
                       "built without image support (install libturbojpeg0-dev and libspng-dev, "
                       "then configure and build again)");
}

#endif

void dpt_image_free(dpt_image *img) {
  if (!img) return;
  free(img->rgba);
  img->rgba = NULL;
}
