/* Status names and the per-thread error message. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DPT_ERROR_MAX 4096

static _Thread_local char tls_message[DPT_ERROR_MAX];

const char *dpt_status_str(dpt_status status) {
  switch (status) {
#define DPT_STATUS_STR_(name, value, text)                                                         \
  case DPT_##name:                                                                                 \
    return text;
    DPT_STATUS_MAP(DPT_STATUS_STR_)
#undef DPT_STATUS_STR_
  }
  return "unknown status";
}

const char *dpt_status_name(dpt_status status) {
  switch (status) {
#define DPT_STATUS_NAME_(name, value, text)                                                        \
  case DPT_##name:                                                                                 \
    return "DPT_" #name;
    DPT_STATUS_MAP(DPT_STATUS_NAME_)
#undef DPT_STATUS_NAME_
  }
  return "DPT_UNKNOWN";
}

const char *dpt_last_error(void) {
  return tls_message;
}

void dpt_clear_error(void) {
  tls_message[0] = '\0';
}

/* A message stays one line whatever it quotes (a tensor name read from a file may hold a
 * newline): control characters become escapes, \n \r \t or \xNN, cut at the buffer's end. */
static void escape_controls(char *msg) {
  size_t n = 0;
  while (msg[n] && (unsigned char)msg[n] >= 0x20 && msg[n] != 0x7f)
    n++;
  if (!msg[n]) return;
  char out[DPT_ERROR_MAX];
  size_t o = 0;
  for (size_t i = 0; msg[i]; i++) {
    const unsigned char c = (unsigned char)msg[i];
    char esc[8] = {(char)c, 0};
    if (c < 0x20 || c == 0x7f)
      snprintf(esc, sizeof esc,
               c == '\n'   ? "\\n"
               : c == '\r' ? "\\r"
               : c == '\t' ? "\\t"
                           : "\\x%02x",
               c);
    const size_t len = strlen(esc);
    if (o + len >= sizeof out) break;
    memcpy(out + o, esc, len);
    o += len;
  }
  out[o] = '\0';
  memcpy(msg, out, o + 1);
}

dpt_status dpt_set_error(dpt_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_message, sizeof tls_message, fmt, ap);
  va_end(ap);
  escape_controls(tls_message);
  return status;
}

dpt_status dpt_error_context(dpt_status status, const char *fmt, ...) {
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(prefix, sizeof prefix - 2, fmt, ap);
  va_end(ap);
  if (n < 0) return status;
  size_t plen = strlen(prefix);
  memcpy(prefix + plen, ": ", 3);
  plen += 2;
  /* Shift the old message right (truncating its end) and put the prefix in front. */
  size_t old_len = strlen(tls_message);
  if (plen + old_len > sizeof tls_message - 1) old_len = sizeof tls_message - 1 - plen;
  memmove(tls_message + plen, tls_message, old_len);
  memcpy(tls_message, prefix, plen);
  tls_message[plen + old_len] = '\0';
  escape_controls(tls_message);
  return status;
}
