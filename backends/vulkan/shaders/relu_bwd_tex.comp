#version 450
#extension GL_GOOGLE_include_directive : require
// relu_bwd.glsl reading x and dy through uniform texel buffers (CPU drivers)
#define DPT_TEX 1
#include "relu_bwd.glsl"
