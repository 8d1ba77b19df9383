#version 450
#extension GL_GOOGLE_include_directive : require
// im2col.glsl reading x through a uniform texel buffer (CPU drivers)
#define DPT_TEX 1
#include "im2col.glsl"
