/* Internal: files embedded into the library at build time (cmake/DptEmbed.cmake). */
#ifndef DPTRAIN_CORE_EMBEDDED_H
#define DPTRAIN_CORE_EMBEDDED_H

#include <stddef.h>

struct dpt_embedded_file {
  const char *name;          /* base name, e.g. "ops.cl" */
  const unsigned char *data; /* contents, followed by a NUL byte not counted in size */
  size_t size;               /* bytes */
};

/* The entry named `name` in a table that ends with a NULL name, or NULL. */
const struct dpt_embedded_file *dpt_embedded_find(const struct dpt_embedded_file *table,
                                                  const char *name);

#endif
