#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// gemm for CPU drivers: see gemm_cpu.glsl; 64 x 128 tiles.
#define RH 1u
#include "gemm_cpu.glsl"
