/* tool.h - the subcommands of the `cgrt` command. */
#ifndef CGRT_TOOLS_TOOL_H
#define CGRT_TOOLS_TOOL_H

#include "cgrt/tool.h"

/* Exit codes shared by the subcommands. */
#define EXIT_VALID    0
#define EXIT_INVALID  1
#define EXIT_UNUSABLE 2

/* Counts of the messages tool_print_msg printed (user: a struct tool_msgs *, or NULL). */
struct tool_msgs {
  int errors;
  int warnings;
};

/* A cgrt_tool_msg_fn: prints "error: ..." or "warning: ..." on stderr, counting into user. */
void tool_print_msg(void *user, cgrt_log_level level, const char *text);

/*
 * Loads the file at path, or parses text (named `name` in messages), into *cfg, printing the
 * messages (unless quiet). Returns EXIT_VALID, or EXIT_INVALID / EXIT_UNUSABLE with *cfg NULL.
 */
int tool_load_config(const char *path, const char *text, const char *name, cgrt_tool_config **cfg,
                     int quiet);

/* The eager reference of a bench: impl none on the cuda driver, with v's device, bind_cpu and
   max_queued_steps (a bound on the host's run-ahead applies to eager steps alike). */
int tool_eager_config(const struct cgrt_config_view *v, cgrt_tool_config **eager);

int cmd_info(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_buckets(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_test_backend(int argc, char **argv);

#endif
