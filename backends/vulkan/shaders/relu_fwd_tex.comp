#version 450
#extension GL_GOOGLE_include_directive : require
// relu_fwd.glsl reading x through a uniform texel buffer (CPU drivers: a gather per fetch)
#define DPT_TEX 1
#include "relu_fwd.glsl"
