/* CRC-32 through zlib, in pieces that fit its uInt length; CRC-32C bit by bit (its
 * records are small: event files). */
#include "base/crc.h"

#include <zlib.h>

uint32_t dpt_crc32_start(void) {
  return (uint32_t)crc32(0L, Z_NULL, 0);
}

uint32_t dpt_crc32(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;
  while (n > 0) {
    const size_t m = n < (1u << 30) ? n : (1u << 30);
    crc = (uint32_t)crc32(crc, b, (uInt)m);
    b += m;
    n -= m;
  }
  return crc;
}

uint32_t dpt_crc32c(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= b[i];
    for (int k = 0; k < 8; ++k)
      crc = crc & 1u ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

uint32_t dpt_crc32c_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
