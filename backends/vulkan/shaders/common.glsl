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
