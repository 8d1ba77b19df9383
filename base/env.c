/* The environment variable table (base/env.h). */
#define _POSIX_C_SOURCE 200809L
#include "base/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dpt_env_var table[] = {
#define DPT_ENV_ROW_(name, kind, def, help) {#name, DPT_ENV_##kind, def, help},
    DPT_ENV_MAP(DPT_ENV_ROW_)
#undef DPT_ENV_ROW_
};

const dpt_env_var *dpt_env_table(size_t *count) {
  *count = sizeof table / sizeof table[0];
  return table;
}

const char *dpt_env_get(const char *name) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i)
    if (!strcmp(table[i].name, name)) return getenv(name);
  fprintf(stderr, "dptrain: environment variable %s is read but not in base/env.h's table\n", name);
  abort();
}
