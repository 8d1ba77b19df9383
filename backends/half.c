/* The public scalar conversions (dptrain/backend.h): base/half.h's, out of line. */
#include "base/half.h"
#include "dptrain/backend.h"

uint16_t dpt_f32_to_f16_scalar(float x) {
  return dpt_half_from_f32(x);
}

float dpt_f16_to_f32_scalar(uint16_t h) {
  return dpt_half_to_f32(h);
}

uint16_t dpt_f32_to_bf16_scalar(float x) {
  return dpt_bfloat_from_f32(x);
}

float dpt_bf16_to_f32_scalar(uint16_t h) {
  return dpt_bfloat_to_f32(h);
}
