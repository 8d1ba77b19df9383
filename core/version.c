/* The version of the library actually linked. */
#include "dptrain/version.h"

#define DPT_STR_(x) #x
#define DPT_STR(x)  DPT_STR_(x)

const char *dpt_version(void) {
  return DPT_STR(DPT_VERSION_MAJOR) "." DPT_STR(DPT_VERSION_MINOR) "." DPT_STR(DPT_VERSION_PATCH);
}
