#version 450
#extension GL_GOOGLE_include_directive : require
#include "im2col.glsl"
