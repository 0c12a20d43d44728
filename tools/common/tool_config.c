/* tool_config.c - loading a configuration for a subcommand, with its messages on stderr. */
#include <stdio.h>

#include "tool.h"

void tool_print_msg(void *user, cgrt_log_level level, const char *text) {
  struct tool_msgs *m = user;
  int error = level == CGRT_LOG_ERROR;
  if (m)
    error ? m->errors++ : m->warnings++;
  fprintf(stderr, "%s: %s\n", error ? "error" : "warning", text);
}

int tool_load_config(const char *path, const char *text, const char *name, cgrt_tool_config **cfg,
                     int quiet) {
  int rc = cgrt_tool_config_read(cfg, path, text, name, quiet ? NULL : tool_print_msg, NULL);
  if (rc == 0)
    return EXIT_VALID;
  return rc == CGRT_E_IO || rc == CGRT_E_NOMEM ? EXIT_UNUSABLE : EXIT_INVALID;
}

int tool_eager_config(const struct cgrt_config_view *v, cgrt_tool_config **eager) {
  char ini[256], device[16] = "current";
  if (v->device >= 0)
    snprintf(device, sizeof(device), "%d", v->device);
  snprintf(ini, sizeof(ini),
           "[cuda_graph]\nimpl = none\n[runtime]\ndriver = cuda\ndevice = %s\nbind_cpu = %s\n"
           "log = warn\nmax_queued_steps = %d\n",
           device, v->bind_cpu ? "auto" : "off", v->max_queued_steps);
  return tool_load_config(NULL, ini, "<bench eager>", eager, 0);
}
