/*
 * tool_args.h - what the command line hands the `cgrt` command, checked before anything runs
 * (issue 38): whole numbers in a range, files to read, files to write, text pasted into INI.
 *
 * Every function here says what is wrong in err as one sentence naming the option or the file
 * and what to give instead ("--calls '1e6': expected a whole number from 1 to 1000000000"); the
 * caller prefixes the command ("cgrt bench: ") and prints it on stderr.
 */
#ifndef CGRT_TOOLS_TOOL_ARGS_H
#define CGRT_TOOLS_TOOL_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * Reads `text`, the value of option `opt`, as a whole number from min to max (min <= max):
 * decimal digits, with one '+' or '-' before them at most; nothing else (no blanks, exponent,
 * fraction, suffix or base prefix). Returns 0 with *out set; otherwise -1, *out untouched, and
 * err = "OPT 'TEXT': expected a whole number from MIN to MAX" (the text quoted by tool_quote).
 */
int tool_parse_int(const char *opt, const char *text, int64_t min, int64_t max, int64_t *out,
                   char *err, size_t errlen);

/* tool_parse_int, its sentence printed on stderr after "CMD: "; 0 or -1. */
int tool_opt_int(const char *cmd, const char *opt, const char *text, int64_t min, int64_t max,
                 int64_t *out);

/*
 * Writes text into buf (len >= 8) as it can be shown in a message: printable ASCII as it is,
 * '\n', '\r' and '\t' as \n, \r, \t, other bytes as \xNN; cut with "..." when it does not fit.
 * Returns buf.
 */
const char *tool_quote(const char *text, char *buf, size_t len);

/*
 * Opens the file at path to read it to its end: only a regular file is read. A directory, a
 * FIFO, a socket or a device (/dev/zero, a terminal) is refused, and opening never blocks (a
 * FIFO is not opened at all: stat first, then open with O_NONBLOCK and fstat what was opened).
 * Returns the stream (close with fclose), or NULL with err = "PATH: what it is; what to give".
 */
FILE *tool_open_input(const char *path, char *err, size_t errlen);

/* tool_open_input, then closed: 0 if path can be read as a file now, else -1 with err. */
int tool_check_input(const char *path, char *err, size_t errlen);

/*
 * Whether a file can be written at path now, before any work whose result goes there, without
 * changing what is there: an existing path must be a regular file that opens for writing (it is
 * not truncated); a new one is created and removed again, so its folder must exist and be
 * writable. Anything else (a directory, a FIFO, a device) is refused. 0, or -1 with err naming
 * `opt` and the path.
 */
int tool_check_output(const char *opt, const char *path, char *err, size_t errlen);

/*
 * Whether `text`, the value of option `opt`, can be pasted as the value of one INI line without
 * changing the INI's meaning: no control character (a newline would start a line of its own),
 * and none of ';' '#' (a comment), '[' ']' (a section), '=' (a key). 0, or -1 with err.
 */
int tool_check_ini_value(const char *opt, const char *text, char *err, size_t errlen);

/*
 * Prints s on stdout as a JSON string, quotes included: '"' and '\\' escaped, control characters
 * as \\u00XX. For text that comes from outside (a path, a configuration's impl): pasted into
 * JSON as it is, a quote in it would end the string. NULL prints "".
 */
void tool_json_string(const char *s);

/* tool_read_line's results besides a line (1) and the end of the file (0). */
#define TOOL_LINE_ERROR (-1) /* a read error: errno says which */
#define TOOL_LINE_LONG  (-2) /* the line does not fit in the buffer */
#define TOOL_LINE_NUL   (-3) /* the line holds a NUL byte */

/*
 * Reads the next line of f into buf[0..cap) (cap >= 2), NUL-terminated, without its '\n' (nor a
 * '\r' right before it). Returns 1 with *len its length, 0 at the end of the file (nothing
 * read), or TOOL_LINE_LONG (more than cap - 1 bytes before the '\n'), TOOL_LINE_NUL (*len: the
 * byte's column, from 0) or TOOL_LINE_ERROR. After one of those the rest of the line is unread.
 */
int tool_read_line(FILE *f, char *buf, size_t cap, size_t *len);

#endif
