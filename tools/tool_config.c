/* tool_config.c - loading a configuration for a subcommand, with its messages on stderr. */
#include <stdio.h>

#include "config.h"
#include "tool.h"

void tool_print_diag(const struct cgrt_diag *diag) {
  for (size_t i = 0; i < diag->count; i++)
    fprintf(stderr, "%s: %s\n", diag->msgs[i].level == CGRT_LOG_ERROR ? "error" : "warning",
            diag->msgs[i].text);
}

int tool_load_config(const char *path, const char *text, const char *name, struct cgrt_config *cfg,
                     int quiet) {
  struct cgrt_diag diag = {0};
  int rc = path ? cgrt__config_load(cfg, path, &diag) : cgrt__config_parse(cfg, text, name, &diag);
  if (!quiet)
    tool_print_diag(&diag);
  cgrt__diag_free(&diag);
  if (rc == 0)
    return EXIT_VALID;
  cgrt__config_free(cfg);
  return rc == CGRT_E_IO || rc == CGRT_E_NOMEM ? EXIT_UNUSABLE : EXIT_INVALID;
}

int tool_eager_config(const struct cgrt_config *cfg, struct cgrt_config *eager) {
  char ini[256];
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = none\n[runtime]\ndriver = cuda\ndevice = %d\nbind_cpu = %s\n"
           "log = warn\n",
           cfg->view.device, cfg->view.bind_cpu ? "auto" : "off");
  return tool_load_config(NULL, ini, "<bench eager>", eager, 0);
}
