#version 450
#extension GL_GOOGLE_include_directive : require
// maxpool_fwd.glsl reading x through a uniform texel buffer (CPU drivers)
#define DPT_TEX 1
#include "maxpool_fwd.glsl"
