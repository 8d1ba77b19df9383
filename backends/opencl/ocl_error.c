/* OpenCL and CLBlast error codes -> dpt_status and a message naming the code and the call.
 *
 * Codes are listed by value (not by the header's macros) so that codes newer than the
 * OpenCL 1.2 headers we compile against still get their names when a newer driver returns
 * them. */
#include <stdio.h>

#include "backends/opencl/ocl_internal.h"
#include "base/error.h"

typedef struct code_name {
  int code;
  const char *name;
} code_name;

static const code_name cl_names[] = {
    {0, "CL_SUCCESS"},
    {-1, "CL_DEVICE_NOT_FOUND"},
    {-2, "CL_DEVICE_NOT_AVAILABLE"},
    {-3, "CL_COMPILER_NOT_AVAILABLE"},
    {-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
    {-5, "CL_OUT_OF_RESOURCES"},
    {-6, "CL_OUT_OF_HOST_MEMORY"},
    {-7, "CL_PROFILING_INFO_NOT_AVAILABLE"},
    {-8, "CL_MEM_COPY_OVERLAP"},
    {-9, "CL_IMAGE_FORMAT_MISMATCH"},
    {-10, "CL_IMAGE_FORMAT_NOT_SUPPORTED"},
    {-11, "CL_BUILD_PROGRAM_FAILURE"},
    {-12, "CL_MAP_FAILURE"},
    {-13, "CL_MISALIGNED_SUB_BUFFER_OFFSET"},
    {-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"},
    {-15, "CL_COMPILE_PROGRAM_FAILURE"},
    {-16, "CL_LINKER_NOT_AVAILABLE"},
    {-17, "CL_LINK_PROGRAM_FAILURE"},
    {-18, "CL_DEVICE_PARTITION_FAILED"},
    {-19, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE"},
    {-30, "CL_INVALID_VALUE"},
    {-31, "CL_INVALID_DEVICE_TYPE"},
    {-32, "CL_INVALID_PLATFORM"},
    {-33, "CL_INVALID_DEVICE"},
    {-34, "CL_INVALID_CONTEXT"},
    {-35, "CL_INVALID_QUEUE_PROPERTIES"},
    {-36, "CL_INVALID_COMMAND_QUEUE"},
    {-37, "CL_INVALID_HOST_PTR"},
    {-38, "CL_INVALID_MEM_OBJECT"},
    {-39, "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR"},
    {-40, "CL_INVALID_IMAGE_SIZE"},
    {-41, "CL_INVALID_SAMPLER"},
    {-42, "CL_INVALID_BINARY"},
    {-43, "CL_INVALID_BUILD_OPTIONS"},
    {-44, "CL_INVALID_PROGRAM"},
    {-45, "CL_INVALID_PROGRAM_EXECUTABLE"},
    {-46, "CL_INVALID_KERNEL_NAME"},
    {-47, "CL_INVALID_KERNEL_DEFINITION"},
    {-48, "CL_INVALID_KERNEL"},
    {-49, "CL_INVALID_ARG_INDEX"},
    {-50, "CL_INVALID_ARG_VALUE"},
    {-51, "CL_INVALID_ARG_SIZE"},
    {-52, "CL_INVALID_KERNEL_ARGS"},
    {-53, "CL_INVALID_WORK_DIMENSION"},
    {-54, "CL_INVALID_WORK_GROUP_SIZE"},
    {-55, "CL_INVALID_WORK_ITEM_SIZE"},
    {-56, "CL_INVALID_GLOBAL_OFFSET"},
    {-57, "CL_INVALID_EVENT_WAIT_LIST"},
    {-58, "CL_INVALID_EVENT"},
    {-59, "CL_INVALID_OPERATION"},
    {-60, "CL_INVALID_GL_OBJECT"},
    {-61, "CL_INVALID_BUFFER_SIZE"},
    {-62, "CL_INVALID_MIP_LEVEL"},
    {-63, "CL_INVALID_GLOBAL_WORK_SIZE"},
    {-64, "CL_INVALID_PROPERTY"},
    {-65, "CL_INVALID_IMAGE_DESCRIPTOR"},
    {-66, "CL_INVALID_COMPILER_OPTIONS"},
    {-67, "CL_INVALID_LINKER_OPTIONS"},
    {-68, "CL_INVALID_DEVICE_PARTITION_COUNT"},
    {-69, "CL_INVALID_PIPE_SIZE"},
    {-70, "CL_INVALID_DEVICE_QUEUE"},
    {-71, "CL_INVALID_SPEC_ID"},
    {-72, "CL_MAX_SIZE_RESTRICTION_EXCEEDED"},
    {-1001, "CL_PLATFORM_NOT_FOUND_KHR"},
};

/* CLBlast's own codes; the codes it shares with OpenCL are named by cl_names. */
static const code_name clblast_names[] = {
    {-1024, "CLBlastNotImplemented"},
    {-1022, "CLBlastInvalidMatrixA"},
    {-1021, "CLBlastInvalidMatrixB"},
    {-1020, "CLBlastInvalidMatrixC"},
    {-1019, "CLBlastInvalidVectorX"},
    {-1018, "CLBlastInvalidVectorY"},
    {-1017, "CLBlastInvalidDimension"},
    {-1016, "CLBlastInvalidLeadDimA"},
    {-1015, "CLBlastInvalidLeadDimB"},
    {-1014, "CLBlastInvalidLeadDimC"},
    {-1013, "CLBlastInvalidIncrementX"},
    {-1012, "CLBlastInvalidIncrementY"},
    {-1011, "CLBlastInsufficientMemoryA"},
    {-1010, "CLBlastInsufficientMemoryB"},
    {-1009, "CLBlastInsufficientMemoryC"},
    {-1008, "CLBlastInsufficientMemoryX"},
    {-1007, "CLBlastInsufficientMemoryY"},
    {-2050, "CLBlastInsufficientMemoryTemp"},
    {-2049, "CLBlastInvalidBatchCount"},
    {-2048, "CLBlastInvalidOverrideKernel"},
    {-2047, "CLBlastMissingOverrideParameter"},
    {-2046, "CLBlastInvalidLocalMemUsage"},
    {-2045, "CLBlastNoHalfPrecision"},
    {-2044, "CLBlastNoDoublePrecision"},
    {-2043, "CLBlastInvalidVectorScalar"},
    {-2042, "CLBlastInsufficientMemoryScalar"},
    {-2041, "CLBlastDatabaseError"},
    {-2040, "CLBlastUnknownError"},
    {-2039, "CLBlastUnexpectedError"},
};

static const char *find_name(const code_name *table, size_t count, int code) {
  for (size_t i = 0; i < count; ++i)
    if (table[i].code == code) return table[i].name;
  return NULL;
}

const char *dpt_ocl_error_name(cl_int err) {
  const char *name = find_name(cl_names, sizeof cl_names / sizeof cl_names[0], err);
  return name ? name : "CL_UNKNOWN_ERROR";
}

dpt_status dpt_ocl_status_of(cl_int err) {
  switch (err) {
  case CL_OUT_OF_RESOURCES:
  case CL_MEM_OBJECT_ALLOCATION_FAILURE:
  case CL_OUT_OF_HOST_MEMORY:
    return DPT_ERR_OUT_OF_MEMORY;
  default:
    return DPT_ERR_DEVICE;
  }
}

static dpt_status report(dpt_status st, const char *name, int code, const char *call,
                         const char *what, size_t bytes) {
  char size_text[64] = "";
  if (st == DPT_ERR_OUT_OF_MEMORY && bytes > 0)
    snprintf(size_text, sizeof size_text, " (asked for %zu bytes)", bytes);
  if (what && what[0])
    return dpt_set_error(st, "%s(%s): %s (%d)%s", call, what, name, code, size_text);
  return dpt_set_error(st, "%s: %s (%d)%s", call, name, code, size_text);
}

dpt_status dpt_ocl_fail(cl_int err, const char *call, const char *what, size_t bytes) {
  return report(dpt_ocl_status_of(err), dpt_ocl_error_name(err), err, call, what, bytes);
}

dpt_status dpt_ocl_clblast_fail(int status, const char *call, const char *what) {
  const char *name =
      find_name(clblast_names, sizeof clblast_names / sizeof clblast_names[0], status);
  if (!name) return dpt_ocl_fail((cl_int)status, call, what, 0);
  dpt_status st = DPT_ERR_DEVICE;
  if (status == -1024 || status == -2045 || status == -2044) st = DPT_ERR_UNSUPPORTED;
  if (status == -2046) st = DPT_ERR_OUT_OF_MEMORY;
  return report(st, name, status, call, what, 0);
}
