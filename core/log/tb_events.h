/* Internal: TensorBoard event files (events.out.tfevents.*): TFRecord framing around
 * hand-encoded protobuf Event messages holding scalar summaries, as TensorBoard reads them.
 *
 * A record is: uint64 length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the
 * data (little-endian; base/crc.h). The data is an Event: wall_time (double, field 1), step
 * (int64, field 2), and file_version "brain.Event:2" (field 3) in the first record or a summary
 * (field 5): Summary{repeated Value value = 1}, Value{string tag = 1, float simple_value = 2}. */
#ifndef DPTRAIN_CORE_LOG_TB_EVENTS_H
#define DPTRAIN_CORE_LOG_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/status.h"

/* One scalar of an event: its tag (e.g. "train/loss") and value. */
typedef struct dpt_tb_scalar {
  const char *tag;
  double value;
} dpt_tb_scalar;

/* The largest Event the writer encodes, bytes. */
#define DPT_TB_EVENT_MAX 4096

/* Encodes one Event into buf[cap]: wall_time, step, then file_version when it is not NULL,
 * else a summary of the n scalars (their values as floats; a value that is not finite is left
 * out). Returns the bytes written, 0 when they would not fit in cap. */
size_t dpt_tb_encode_event(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                           const char *file_version, const dpt_tb_scalar *v, size_t n);
/* Frames data[n] as one TFRecord into out[n + 16]; returns n + 16. */
size_t dpt_tb_frame(uint8_t *out, const uint8_t *data, size_t n);

typedef struct dpt_tb_writer dpt_tb_writer;

/* Creates the event file at path (refused when it exists) and writes its first record, the
 * file_version event. DPT_ERR_IO naming the path. */
dpt_status dpt_tb_open(const char *path, dpt_tb_writer **out);
/* One event of n scalars at step, stamped with wall_time (seconds since the epoch), written
 * and flushed. DPT_ERR_IO on a failed write, DPT_ERR_INVALID_ARG when it is too large. */
dpt_status dpt_tb_write(dpt_tb_writer *w, double wall_time, int64_t step, const dpt_tb_scalar *v,
                        size_t n);
/* Closes the file; NULL does nothing. */
void dpt_tb_close(dpt_tb_writer *w);

#endif
