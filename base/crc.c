/* CRC-32 through zlib, in pieces that fit its uInt length. */
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
