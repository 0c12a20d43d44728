/*
 * fuzz_config.c - libFuzzer target: any bytes as INI text through the whole configuration path
 * (parse, legacy migration, rules, the backend-section check, normalized printing and re-parsing
 * of the printed form). It must never crash, leak or hang, and the printed form of a valid
 * configuration must read back as valid.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  struct cgrt_config cfg = {0};
  struct cgrt_diag diag = {0};
  int rc = cgrt__config_parse(&cfg, text, "<fuzz>", &diag);
  if (rc == 0) {
    cgrt__config_check_backend_keys(&cfg, &diag);
    char *printed = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&printed, &len);
    if (f) {
      cgrt__config_print(&cfg, f);
      fclose(f);
      struct cgrt_config again = {0};
      struct cgrt_diag d2 = {0};
      if (cgrt__config_parse(&again, printed, "<printed>", &d2) != 0) {
        fprintf(stderr, "the printed form of a valid configuration does not read back:\n%s\n%s\n",
                printed, cgrt__diag_first_error(&d2));
        abort();
      }
      cgrt__config_free(&again);
      cgrt__diag_free(&d2);
      free(printed);
    }
  }
  cgrt__config_free(&cfg);
  cgrt__diag_free(&diag);
  free(text);
  return 0;
}
