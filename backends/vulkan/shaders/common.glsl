// Shared by every shader; included after the local_size layout.
// Dispatches may be split over a 2-D grid of workgroups (maxComputeWorkGroupCount): the
// linear workgroup index is rebuilt here. Tensor element offsets (< alignment) arrive in push
// constants.

uint dpt_group() {
  return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

uint dpt_gid() {
  return dpt_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
}

bool dpt_isnan(float v) {
  return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u;
}

// Non-finite test on the bits, immune to fast-math assumptions of a driver's compiler.
bool dpt_nonfinite(float v) {
  return (floatBitsToUint(v) & 0x7f800000u) == 0x7f800000u;
}

#define DPT_NAN uintBitsToFloat(0x7fc00000u)

// A read-only input: a texel buffer where the shader is built with DPT_TEX (a texel fetch is one
// gather on CPU drivers, a storage-buffer load a loop over the SIMD lanes), else a storage buffer.
// Read it with DPT_LOAD(name, i).
#ifdef DPT_TEX
#define DPT_INPUT_F32(b, name) layout(set = 0, binding = b) uniform samplerBuffer name##_tex
#define DPT_INPUT_I32(b, name) layout(set = 0, binding = b) uniform isamplerBuffer name##_tex
#define DPT_LOAD(name, i) texelFetch(name##_tex, int(i)).x
#else
#define DPT_INPUT_F32(b, name) \
  layout(std430, set = 0, binding = b) readonly buffer name##_in { float name[]; }
#define DPT_INPUT_I32(b, name) \
  layout(std430, set = 0, binding = b) readonly buffer name##_in { int name[]; }
#define DPT_LOAD(name, i) name[i]
#endif
