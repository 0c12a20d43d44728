/*
 * test_tool_args.c - what the `cgrt` command checks of its command line (tools/common/tool_args.c,
 * issue 38): whole numbers read whole and within their range (the limits of int64_t included),
 * files read only when regular (a FIFO refused without blocking), a file to write checked
 * without being changed, INI text refused when it would change the INI, lines read whole with a
 * NUL byte or an overlong line said.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tool_args.h"

static char dir[64];

/* Each test its own folder. */
static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/cgrt-test-tool-args-XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static const char *in_dir(const char *name) {
  static char path[256];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  return path;
}

static void numbers_whole_and_in_range(void **state) {
  (void)state;
  char err[256];
  int64_t v = 7;
  assert_int_equal(tool_parse_int("--n", "42", 1, 100, &v, err, sizeof(err)), 0);
  assert_int_equal(v, 42);
  assert_int_equal(tool_parse_int("--n", "+5", 1, 100, &v, err, sizeof(err)), 0);
  assert_int_equal(v, 5);
  assert_int_equal(tool_parse_int("--n", "-3", -5, 5, &v, err, sizeof(err)), 0);
  assert_int_equal(v, -3);
  assert_int_equal(tool_parse_int("--n", "9223372036854775807", 0, INT64_MAX, &v, err, sizeof(err)),
                   0);
  assert_true(v == INT64_MAX);
  assert_int_equal(
      tool_parse_int("--n", "-9223372036854775808", INT64_MIN, 0, &v, err, sizeof(err)), 0);
  assert_true(v == INT64_MIN);
  /* Refused, *out untouched, the sentence naming option, text and range. */
  static const char *const bad[] = {"",
                                    "-",
                                    "+",
                                    " 5",
                                    "5 ",
                                    "1e6",
                                    "10abc",
                                    "0x10",
                                    "3.0",
                                    "--5",
                                    "0",
                                    "101",
                                    "-1",
                                    "2147483648",
                                    "4294967297",
                                    "9223372036854775808",
                                    "99999999999999999999999"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    v = 7;
    assert_int_equal(tool_parse_int("--calls", bad[i], 1, 100, &v, err, sizeof(err)), -1);
    assert_int_equal(v, 7);
    char want[128];
    snprintf(want, sizeof(want), "--calls '%s': expected a whole number from 1 to 100", bad[i]);
    assert_string_equal(err, want);
  }
  assert_int_equal(
      tool_parse_int("--n", "9223372036854775808", INT64_MIN, INT64_MAX, &v, err, sizeof(err)), -1);
  assert_int_equal(
      tool_parse_int("--n", "-9223372036854775809", INT64_MIN, INT64_MAX, &v, err, sizeof(err)),
      -1);
}

static void quoted_text_shows_every_byte(void **state) {
  (void)state;
  char q[64];
  assert_string_equal(tool_quote("a\nb\t\x01", q, sizeof(q)), "a\\nb\\t\\x01");
  char small[12];
  assert_string_equal(tool_quote("0123456789abcdef", small, sizeof(small)), "01234567...");
  char err[256];
  int64_t v;
  assert_int_equal(tool_parse_int("--n", "1\n2", 1, 9, &v, err, sizeof(err)), -1);
  assert_string_equal(err, "--n '1\\n2': expected a whole number from 1 to 9");
}

static void only_regular_files_are_read(void **state) {
  (void)state;
  char err[512];
  FILE *f = fopen(in_dir("ok.txt"), "w");
  assert_non_null(f);
  fputs("3\n", f);
  fclose(f);
  f = tool_open_input(in_dir("ok.txt"), err, sizeof(err));
  assert_non_null(f);
  fclose(f);
  assert_int_equal(tool_check_input(in_dir("ok.txt"), err, sizeof(err)), 0);

  assert_int_equal(mkfifo(in_dir("fifo"), 0600), 0);
  assert_int_equal(tool_check_input(in_dir("fifo"), err, sizeof(err)), -1); /* did not block */
  assert_non_null(strstr(err, "fifo: a FIFO (named pipe), not a regular file"));
  assert_int_equal(tool_check_input(dir, err, sizeof(err)), -1);
  assert_non_null(strstr(err, ": a directory, not a regular file"));
  assert_int_equal(tool_check_input("/dev/zero", err, sizeof(err)), -1);
  assert_non_null(strstr(err, "/dev/zero: a character device, not a regular file"));
  assert_int_equal(tool_check_input(in_dir("missing"), err, sizeof(err)), -1);
  assert_non_null(strstr(err, "missing: cannot read it: No such file or directory"));
}

static void output_checked_without_change(void **state) {
  (void)state;
  char err[512];
  /* A new file: created and removed again. */
  assert_int_equal(tool_check_output("--plot", in_dir("new.svg"), err, sizeof(err)), 0);
  assert_int_equal(access(in_dir("new.svg"), F_OK), -1);
  /* An existing file keeps its content. */
  FILE *f = fopen(in_dir("old.svg"), "w");
  assert_non_null(f);
  fputs("kept", f);
  fclose(f);
  assert_int_equal(tool_check_output("--plot", in_dir("old.svg"), err, sizeof(err)), 0);
  struct stat st;
  assert_int_equal(stat(in_dir("old.svg"), &st), 0);
  assert_int_equal(st.st_size, 4);
  /* A directory, a FIFO, a folder that does not exist, an empty path. */
  assert_int_equal(tool_check_output("--plot", dir, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "it is a directory"));
  assert_int_equal(mkfifo(in_dir("out.fifo"), 0600), 0);
  assert_int_equal(tool_check_output("--plot", in_dir("out.fifo"), err, sizeof(err)), -1);
  assert_non_null(strstr(err, "it is a FIFO"));
  assert_int_equal(tool_check_output("--plot", in_dir("no/x.svg"), err, sizeof(err)), -1);
  assert_non_null(strstr(err, "cannot create it: No such file or directory"));
  assert_int_equal(tool_check_output("--plot", "", err, sizeof(err)), -1);
}

static void ini_text_that_changes_the_ini_is_refused(void **state) {
  (void)state;
  char err[256];
  assert_int_equal(tool_check_ini_value("--memory-budget", "512 MiB", err, sizeof(err)), 0);
  assert_int_equal(tool_check_ini_value("--memory-budget", "off", err, sizeof(err)), 0);
  static const char *const bad[] = {"512 MiB\n[runtime]", "1 GiB\r", "512 MiB ; x", "1 # x",
                                    "[runtime]",          "a = b",   "1\x1b GiB"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(tool_check_ini_value("--memory-budget", bad[i], err, sizeof(err)), -1);
    assert_non_null(strstr(err, "--memory-budget '"));
    assert_non_null(strstr(err, "holds "));
  }
}

static void lines_read_whole(void **state) {
  (void)state;
  FILE *f = fopen(in_dir("lines.txt"), "w+");
  assert_non_null(f);
  fwrite("ab\r\n\ncd\n3\0 5\nxyz", 1, 17, f);
  rewind(f);
  char buf[8];
  size_t len = 99;
  assert_int_equal(tool_read_line(f, buf, sizeof(buf), &len), 1);
  assert_string_equal(buf, "ab");
  assert_int_equal(tool_read_line(f, buf, sizeof(buf), &len), 1);
  assert_int_equal(len, 0);
  assert_int_equal(tool_read_line(f, buf, sizeof(buf), &len), 1);
  assert_string_equal(buf, "cd");
  assert_int_equal(tool_read_line(f, buf, sizeof(buf), &len), TOOL_LINE_NUL);
  assert_int_equal(len, 1); /* the NUL's column, from 0 */
  fclose(f);
  /* A last line without '\n', then the end; a line that does not fit. */
  f = fopen(in_dir("lines.txt"), "w+");
  assert_non_null(f);
  fputs("1234567\nxyz", f);
  rewind(f);
  assert_int_equal(tool_read_line(f, buf, sizeof(buf), &len), 1);
  assert_string_equal(buf, "1234567");
  assert_int_equal(tool_read_line(f, buf, sizeof(buf), &len), 1);
  assert_string_equal(buf, "xyz");
  assert_int_equal(tool_read_line(f, buf, sizeof(buf), &len), 0);
  rewind(f);
  assert_int_equal(tool_read_line(f, buf, 7, &len), TOOL_LINE_LONG);
  fclose(f);
}

static void json_strings_escaped(void **state) {
  (void)state;
  FILE *f = fopen(in_dir("out.json"), "w+");
  assert_non_null(f);
  fflush(stdout);
  int saved = dup(1);
  assert_true(saved >= 0 && dup2(fileno(f), 1) == 1);
  tool_json_string("a\"b\\c\nd\x01");
  tool_json_string(NULL);
  fflush(stdout);
  assert_int_equal(dup2(saved, 1), 1);
  close(saved);
  rewind(f);
  char text[128] = "";
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = '\0';
  fclose(f);
  assert_string_equal(text, "\"a\\\"b\\\\c\\u000ad\\u0001\"\"\"");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(numbers_whole_and_in_range, setup, teardown),
      cmocka_unit_test_setup_teardown(quoted_text_shows_every_byte, setup, teardown),
      cmocka_unit_test_setup_teardown(only_regular_files_are_read, setup, teardown),
      cmocka_unit_test_setup_teardown(output_checked_without_change, setup, teardown),
      cmocka_unit_test_setup_teardown(ini_text_that_changes_the_ini_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(lines_read_whole, setup, teardown),
      cmocka_unit_test_setup_teardown(json_strings_escaped, setup, teardown),
  };
  return cmocka_run_group_tests_name("tool_args", tests, NULL, NULL);
}
