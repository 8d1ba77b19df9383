/* Fuzz target: model files (core/model/model_json.c), from memory through
 * dpt_model_spec_parse_json (the text up to its first NUL). An accepted model writes back to
 * JSON (or says why it cannot) that parses again and writes the same text. */
#include <stdlib.h>
#include <string.h>

#include "dptrain/model.h"
#include "tests/fuzz/fuzz.h"

int dpt_fuzz_one(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  dpt_fuzz_check(text != NULL, "out of memory");
  memcpy(text, data, size);
  text[size] = 0;
  static dpt_model_spec spec, again; /* large: kept off the stack */
  const dpt_status s = dpt_model_spec_parse_json(text, "fuzz", &spec);
  free(text);
  if (s != DPT_OK) return dpt_fuzz_rejected(s);
  char *json = NULL, *json2 = NULL;
  const dpt_status w = dpt_model_spec_to_json(&spec, &json);
  if (w != DPT_OK) return dpt_fuzz_rejected(w) + 1; /* a spec it cannot name, refused in words */
  const dpt_status s2 = dpt_model_spec_parse_json(json, "fuzz(written)", &again);
  if (s2 != DPT_OK) dpt_fuzz_rejected(s2);
  dpt_fuzz_check(s2 == DPT_OK, "the model's own JSON is refused");
  dpt_fuzz_check(dpt_model_spec_to_json(&again, &json2) == DPT_OK, "to_json failed");
  dpt_fuzz_check(!strcmp(json, json2), "the model changed through its JSON");
  free(json);
  free(json2);
  return 1;
}
