/* TensorBoard event files (core/log/tb_events.h): the protobuf wire format written by hand
 * (varints, fixed 32- and 64-bit fields, length-delimited fields) and the TFRecord framing. */
#include "core/log/tb_events.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/crc.h"
#include "base/error.h"

struct dpt_tb_writer {
  FILE *f;
  char path[4096];
};

/* A bounded output buffer: writes past cap are counted, not made. */
typedef struct pb_out {
  uint8_t *p;
  size_t n, cap;
} pb_out;

static void put_byte(pb_out *o, uint8_t b) {
  if (o->n < o->cap) o->p[o->n] = b;
  ++o->n;
}

static void put_varint(pb_out *o, uint64_t v) {
  while (v >= 0x80) {
    put_byte(o, (uint8_t)(v | 0x80));
    v >>= 7;
  }
  put_byte(o, (uint8_t)v);
}

static void put_le(pb_out *o, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    put_byte(o, (uint8_t)(v >> (8 * i)));
}

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

/* A length-delimited field: key (field << 3 | 2), length, bytes. */
static void put_bytes(pb_out *o, unsigned field, const void *data, size_t n) {
  put_varint(o, (uint64_t)field << 3 | 2);
  put_varint(o, n);
  for (size_t i = 0; i < n; ++i)
    put_byte(o, ((const uint8_t *)data)[i]);
}

/* Value{tag = 1, simple_value = 2}: its encoded size. */
static size_t value_size(const dpt_tb_scalar *s) {
  const size_t t = strlen(s->tag);
  return 1 + varint_size(t) + t + 5;
}

static void put_value(pb_out *o, const dpt_tb_scalar *s) {
  const float f = (float)s->value;
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  put_varint(o, 1u << 3 | 2); /* Summary.value */
  put_varint(o, value_size(s));
  put_bytes(o, 1, s->tag, strlen(s->tag));
  put_varint(o, 2u << 3 | 5); /* fixed32 */
  put_le(o, bits, 4);
}

size_t dpt_tb_encode_event(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                           const char *file_version, const dpt_tb_scalar *v, size_t n) {
  pb_out o = {buf, 0, cap};
  uint64_t bits;
  memcpy(&bits, &wall_time, sizeof bits);
  put_varint(&o, 1u << 3 | 1); /* wall_time: fixed64 */
  put_le(&o, bits, 8);
  put_varint(&o, 2u << 3 | 0); /* step: varint, two's complement */
  put_varint(&o, (uint64_t)step);
  if (file_version) {
    put_bytes(&o, 3, file_version, strlen(file_version));
  } else {
    size_t summary = 0;
    for (size_t i = 0; i < n; ++i)
      if (isfinite(v[i].value)) summary += 1 + varint_size(value_size(&v[i])) + value_size(&v[i]);
    put_varint(&o, 5u << 3 | 2);
    put_varint(&o, summary);
    for (size_t i = 0; i < n; ++i)
      if (isfinite(v[i].value)) put_value(&o, &v[i]);
  }
  return o.n <= cap ? o.n : 0;
}

size_t dpt_tb_frame(uint8_t *out, const uint8_t *data, size_t n) {
  pb_out o = {out, 0, n + 16};
  put_le(&o, n, 8);
  put_le(&o, dpt_crc32c_mask(dpt_crc32c(0, out, 8)), 4);
  memcpy(out + 12, data, n);
  o.n += n;
  put_le(&o, dpt_crc32c_mask(dpt_crc32c(0, data, n)), 4);
  return o.n;
}

/* One event framed, written and flushed. */
static dpt_status write_event(dpt_tb_writer *w, double wall_time, int64_t step,
                              const char *file_version, const dpt_tb_scalar *v, size_t n) {
  uint8_t data[DPT_TB_EVENT_MAX], rec[DPT_TB_EVENT_MAX + 16];
  const size_t len = dpt_tb_encode_event(data, sizeof data, wall_time, step, file_version, v, n);
  if (len == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: an event of %zu scalars over %d bytes", w->path,
                         n, DPT_TB_EVENT_MAX);
  const size_t total = dpt_tb_frame(rec, data, len);
  if (fwrite(rec, 1, total, w->f) != total || fflush(w->f) != 0)
    return dpt_set_error(DPT_ERR_IO, "cannot write %s: %s", w->path, strerror(errno));
  return DPT_OK;
}

dpt_status dpt_tb_open(const char *path, dpt_tb_writer **out) {
  *out = NULL;
  dpt_tb_writer *w = calloc(1, sizeof *w);
  if (!w) return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "event file: out of host memory");
  snprintf(w->path, sizeof w->path, "%s", path);
  w->f = fopen(path, "wbx");
  if (!w->f) {
    const int e = errno;
    free(w);
    return dpt_set_error(DPT_ERR_IO, "cannot create %s: %s", path, strerror(e));
  }
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  const dpt_status st =
      write_event(w, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, 0, "brain.Event:2", NULL, 0);
  if (st != DPT_OK) {
    dpt_tb_close(w);
    return st;
  }
  *out = w;
  return DPT_OK;
}

dpt_status dpt_tb_write(dpt_tb_writer *w, double wall_time, int64_t step, const dpt_tb_scalar *v,
                        size_t n) {
  return write_event(w, wall_time, step, NULL, v, n);
}

void dpt_tb_close(dpt_tb_writer *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  free(w);
}
