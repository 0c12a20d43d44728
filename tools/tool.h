/* tool.h - the subcommands of the `cgrt` command. */
#ifndef CGRT_TOOL_H
#define CGRT_TOOL_H

/* Exit codes shared by the subcommands. */
#define EXIT_VALID    0
#define EXIT_INVALID  1
#define EXIT_UNUSABLE 2

int cmd_info(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_buckets(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
