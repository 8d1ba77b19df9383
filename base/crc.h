/* CRC-32 (zlib's, the one PNG and gzip use) over buffers of any size. */
#ifndef DPTRAIN_BASE_CRC_H
#define DPTRAIN_BASE_CRC_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of no bytes: the start of a running CRC. */
uint32_t dpt_crc32_start(void);
/* crc continued over n bytes at p (n may exceed zlib's uInt: fed in pieces). */
uint32_t dpt_crc32(uint32_t crc, const void *p, size_t n);

#endif
