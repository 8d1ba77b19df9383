#version 450
#extension GL_GOOGLE_include_directive : require
#include "col2im.glsl"
