/* Lookup in the tables of files embedded at build time (base/embedded.h). */
#include "base/embedded.h"

#include <string.h>

const struct dpt_embedded_file *dpt_embedded_find(const struct dpt_embedded_file *table,
                                                  const char *name) {
  for (; table && table->name; ++table)
    if (strcmp(table->name, name) == 0) return table;
  return NULL;
}
