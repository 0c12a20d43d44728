/* tool_args.c - checking what the command line gives (tool_args.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tool_args.h"

const char *tool_quote(const char *text, char *buf, size_t len) {
  size_t n = 0;
  for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
    char piece[8];
    if (*c == '\n' || *c == '\r' || *c == '\t')
      snprintf(piece, sizeof(piece), "\\%c", *c == '\n' ? 'n' : *c == '\r' ? 'r' : 't');
    else if (*c < 0x20 || *c >= 0x7f)
      snprintf(piece, sizeof(piece), "\\x%02x", *c);
    else
      snprintf(piece, sizeof(piece), "%c", *c);
    size_t k = strlen(piece);
    if (n + k + 4 > len) { /* room for "..." and the NUL */
      memcpy(buf + n, "...", 4);
      return buf;
    }
    memcpy(buf + n, piece, k);
    n += k;
  }
  buf[n] = '\0';
  return buf;
}

int tool_parse_int(const char *opt, const char *text, int64_t min, int64_t max, int64_t *out,
                   char *err, size_t errlen) {
  const char *s = text;
  int negative = *s == '-';
  if (*s == '-' || *s == '+')
    s++;
  /* The magnitude, up to 2^63 (INT64_MIN's); anything larger is out of every range. */
  uint64_t v = 0;
  int ok = *s != '\0';
  for (; ok && *s; s++) {
    if (*s < '0' || *s > '9' || v > ((UINT64_C(1) << 63) - (uint64_t)(*s - '0')) / 10)
      ok = 0;
    else
      v = v * 10 + (uint64_t)(*s - '0');
  }
  int64_t x = 0;
  if (ok && !negative && v > (uint64_t)INT64_MAX)
    ok = 0;
  else if (ok)
    x = negative ? (v == UINT64_C(1) << 63 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
  if (!ok || x < min || x > max) {
    char q[64];
    snprintf(err, errlen, "%s '%s': expected a whole number from %" PRId64 " to %" PRId64, opt,
             tool_quote(text, q, sizeof(q)), min, max);
    return -1;
  }
  *out = x;
  return 0;
}

int tool_opt_int(const char *cmd, const char *opt, const char *text, int64_t min, int64_t max,
                 int64_t *out) {
  char err[256];
  if (tool_parse_int(opt, text, min, max, out, err, sizeof(err)) == 0)
    return 0;
  fprintf(stderr, "%s: %s\n", cmd, err);
  return -1;
}

/* What a file that is not a regular one is, for the message. */
static const char *kind_of(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO (named pipe)";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  return "not a regular file";
}

static void not_a_file(const char *path, mode_t mode, char *err, size_t errlen) {
  snprintf(err, errlen,
           "%s: %s, not a regular file: only files are read (a device or a pipe may never end, "
           "or never answer); give the path of a file, saving what a pipe gives into one first",
           path, kind_of(mode));
}

FILE *tool_open_input(const char *path, char *err, size_t errlen) {
  struct stat st;
  int fd = -1, flags;
  FILE *f = NULL;
  if (stat(path, &st) != 0)
    goto io_fail;
  if (!S_ISREG(st.st_mode)) {
    not_a_file(path, st.st_mode, err, errlen);
    goto fail;
  }
  /* Replaced by a FIFO since the stat, it must not block the open: checked again below. */
  fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0 || fstat(fd, &st) != 0)
    goto io_fail;
  if (!S_ISREG(st.st_mode)) {
    not_a_file(path, st.st_mode, err, errlen);
    goto fail;
  }
  flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 || !(f = fdopen(fd, "r")))
    goto io_fail;
  return f;

io_fail:
  snprintf(err, errlen, "%s: cannot read it: %s; check the path and its permissions", path,
           strerror(errno));
fail:
  if (fd >= 0)
    close(fd);
  return NULL;
}

int tool_check_input(const char *path, char *err, size_t errlen) {
  FILE *f = tool_open_input(path, err, errlen);
  if (!f)
    return -1;
  fclose(f);
  return 0;
}

int tool_check_output(const char *opt, const char *path, char *err, size_t errlen) {
  struct stat st;
  if (!path[0]) {
    snprintf(err, errlen, "%s '': expected the path of a file to write", opt);
    return -1;
  }
  if (stat(path, &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      snprintf(err, errlen, "%s %s: it is %s; give the path of a file to write (it is replaced)",
               opt, path, kind_of(st.st_mode));
      return -1;
    }
    /* Opened to know it can be written, not truncated: it keeps its content until then. */
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      snprintf(err, errlen, "%s %s: cannot write it: %s; give a file you can write", opt, path,
               strerror(errno));
      return -1;
    }
    close(fd);
    return 0;
  }
  if (errno != ENOENT) {
    snprintf(err, errlen, "%s %s: %s; give a file you can write", opt, path, strerror(errno));
    return -1;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) {
    snprintf(err, errlen,
             "%s %s: cannot create it: %s; give a file in a folder that exists and that you can "
             "write",
             opt, path, strerror(errno));
    return -1;
  }
  close(fd);
  unlink(path);
  return 0;
}

int tool_check_ini_value(const char *opt, const char *text, char *err, size_t errlen) {
  for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
    const char *what = NULL;
    if (*c == '\n' || *c == '\r')
      what = "a line break, which would start an INI line of its own";
    else if (*c < 0x20 || *c == 0x7f)
      what = "a control character";
    else if (*c == ';' || *c == '#')
      what = "a comment character (; or #), which would cut the value";
    else if (*c == '[' || *c == ']')
      what = "a bracket, which would be read as an INI section";
    else if (*c == '=')
      what = "'=', which would be read as another key";
    if (what) {
      char q[96];
      snprintf(err, errlen, "%s '%s': holds %s; give the value alone", opt,
               tool_quote(text, q, sizeof(q)), what);
      return -1;
    }
  }
  return 0;
}

void tool_json_string(const char *s) {
  putchar('"');
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20 || c == 0x7f)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

int tool_read_line(FILE *f, char *buf, size_t cap, size_t *len) {
  size_t n = 0;
  int c;
  while ((c = getc(f)) != EOF && c != '\n') {
    if (c == '\0') {
      *len = n;
      return TOOL_LINE_NUL;
    }
    if (n + 1 >= cap) {
      *len = n;
      return TOOL_LINE_LONG;
    }
    buf[n++] = (char)c;
  }
  if (c == EOF && ferror(f))
    return TOOL_LINE_ERROR;
  if (c == EOF && n == 0)
    return 0;
  if (n > 0 && buf[n - 1] == '\r')
    n--;
  buf[n] = '\0';
  *len = n;
  return 1;
}
