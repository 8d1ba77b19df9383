#version 450
#extension GL_GOOGLE_include_directive : require
// maxpool_bwd.glsl reading dy and argmax through uniform texel buffers (R32F, R32I; CPU drivers)
#define DPT_TEX 1
#include "maxpool_bwd.glsl"
