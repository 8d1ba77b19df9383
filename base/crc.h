/* CRC-32 (zlib's, the one PNG and gzip use) over buffers of any size, and CRC-32C (Castagnoli,
 * the one TFRecord files use) with TFRecord's masked form. */
#ifndef DPTRAIN_BASE_CRC_H
#define DPTRAIN_BASE_CRC_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of no bytes: the start of a running CRC. */
uint32_t dpt_crc32_start(void);
/* crc continued over n bytes at p (n may exceed zlib's uInt: fed in pieces). */
uint32_t dpt_crc32(uint32_t crc, const void *p, size_t n);

/* CRC-32C (reflected polynomial 0x82F63B78) continued over n bytes at p; start from 0
 * ("123456789" gives 0xE3069283). */
uint32_t dpt_crc32c(uint32_t crc, const void *p, size_t n);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, modulo 2^32. */
uint32_t dpt_crc32c_mask(uint32_t crc);

#endif
