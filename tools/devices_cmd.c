/* `dptrain devices`: every backend and device found, one per line. */
#include <stdio.h>
#include <string.h>

#include "dptrain/advanced.h"
#include "tools/commands.h"
#include "tools/options.h"

static const dpt_opt_cmd devices_cmd = {
    "dptrain devices",
    "usage: dptrain devices\n"
    "\n"
    "Lists every backend and device found, one per line; exits 1 when there is none.\n",
    NULL,
    0,
    0,
};

const dpt_opt_cmd *dpt_devices_options(void) {
  return &devices_cmd;
}

/* One line per device: "<backend>:<index>  <type>  <name>  (<vendor>, <memory>, <driver>)".
 * Backends without devices get one line saying why. Exit 0 when at least one device exists. */
int dpt_cmd_devices(int argc, char **argv) {
  const int rc = dpt_opt_parse(&devices_cmd, NULL, argc, argv, NULL, NULL);
  if (rc != DPT_OPT_KEEP_GOING) return rc;
  int total = 0;
  for (int k = 0; k < DPT_BACKEND_KIND_COUNT; ++k) {
    dpt_backend_kind kind = (dpt_backend_kind)k;
    const char *name = dpt_backend_kind_name(kind);
    if (!dpt_backend_compiled(kind)) {
      printf("%-9s -  not compiled into this build\n", name);
      continue;
    }
    int count = 0;
    dpt_clear_error();
    dpt_status st = dpt_device_count(kind, &count);
    if (st != DPT_OK) {
      printf("%-9s -  error: %s: %s\n", name, dpt_status_str(st), dpt_last_error());
      continue;
    }
    if (count == 0) {
      const char *why = dpt_last_error();
      printf("%-9s -  no device%s%s\n", name, *why ? ": " : "", why);
      continue;
    }
    for (int i = 0; i < count; ++i) {
      dpt_device_info info;
      st = dpt_device_get_info(kind, i, &info);
      if (st != DPT_OK) {
        printf("%s:%-*d error: %s: %s\n", name, (int)(8 - strlen(name)), i, dpt_status_str(st),
               dpt_last_error());
        continue;
      }
      printf("%s:%-*d %-15s %s  (%s, %.1f GiB, %s)\n", name, (int)(8 - strlen(name)), i,
             dpt_device_type_name(info.type), info.name, info.vendor,
             (double)info.memory_bytes / (1024.0 * 1024.0 * 1024.0), info.driver);
      ++total;
    }
  }
  return total > 0 ? 0 : 1;
}
