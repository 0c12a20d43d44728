/* tool.h - the subcommands of the `cgrt` command. */
#ifndef CGRT_TOOL_H
#define CGRT_TOOL_H

/* Exit codes shared by the subcommands. */
#define EXIT_VALID    0
#define EXIT_INVALID  1
#define EXIT_UNUSABLE 2

struct cgrt_config;
struct cgrt_diag;

/* Prints a configuration's errors and warnings on stderr. */
void tool_print_diag(const struct cgrt_diag *diag);

/*
 * Loads the file at path, or parses text (named `name` in messages), into cfg, printing the
 * messages (unless quiet). Returns EXIT_VALID, or EXIT_INVALID / EXIT_UNUSABLE with cfg freed.
 */
int tool_load_config(const char *path, const char *text, const char *name, struct cgrt_config *cfg,
                     int quiet);

/* The eager reference of a bench: impl none on the cuda driver and cfg's device. */
int tool_eager_config(const struct cgrt_config *cfg, struct cgrt_config *eager);

int cmd_info(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_buckets(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);

#endif
