#version 450
#extension GL_GOOGLE_include_directive : require
// col2im.glsl reading col through a uniform texel buffer (CPU drivers)
#define DPT_TEX 1
#include "col2im.glsl"
