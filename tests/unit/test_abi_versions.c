/*
 * test_abi_versions.c - the version labels of the public headers can be trusted: every group
 * appended to a struct or enum says `since minor N` (backend.h) or `since 0.N` (cgrt.h), no label
 * names a version above the header's own constant, the newest label is that constant, and no
 * vague label ("appended after", "later") is left. CGRT_VIEW_HAS answers by struct_size.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgrt/backend.h"

/* The text of a header under core/include/cgrt of the source tree (malloc'ed). */
static char *read_header(const char *name) {
  const char *src = getenv("CGRT_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof(path), "%s/core/include/cgrt/%s", src ? src : ".", name);
  FILE *f = fopen(path, "rb");
  if (!f)
    fail_msg("cannot read %s (set CGRT_SOURCE_DIR to the source tree)", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)n + 1);
  assert_non_null(text);
  assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
  text[n] = '\0';
  fclose(f);
  return text;
}

/* The line number of position p in text, for messages. */
static int line_of(const char *text, const char *p) {
  int line = 1;
  for (const char *q = text; q < p; q++)
    line += *q == '\n';
  return line;
}

/* Every `label N` in text is at most `top`; returns the highest (-1 if none). */
static int check_labels(const char *name, const char *text, const char *label, int top) {
  int highest = -1;
  size_t n = strlen(label);
  for (const char *p = strstr(text, label); p; p = strstr(p + n, label)) {
    char *end;
    long v = strtol(p + n, &end, 10);
    if (end == p + n)
      continue; /* prose: "since minor N" */
    if (v > top)
      fail_msg("%s:%d: '%s%ld' is above the header's own version (%d)", name, line_of(text, p),
               label, v, top);
    if (v > highest)
      highest = (int)v;
  }
  return highest;
}

static void assert_no_vague_label(const char *name, const char *text) {
  static const char *const vague[] = {"appended after", "appended later", "appended in",
                                      "-- appended --"};
  for (size_t i = 0; i < sizeof(vague) / sizeof(vague[0]); i++) {
    const char *p = strstr(text, vague[i]);
    if (p)
      fail_msg("%s:%d: '%s': label the group `since` the version it appeared in", name,
               line_of(text, p), vague[i]);
  }
}

static void backend_h_labels_match_host_api_minor(void **state) {
  (void)state;
  char *text = read_header("backend.h");
  assert_no_vague_label("backend.h", text);
  int highest = check_labels("backend.h", text, "since minor ", CGRT_HOST_API_MINOR);
  assert_int_equal(highest, CGRT_HOST_API_MINOR);
  free(text);
}

static void cgrt_h_labels_match_version_minor(void **state) {
  (void)state;
  char *text = read_header("cgrt.h");
  assert_no_vague_label("cgrt.h", text);
  int highest = check_labels("cgrt.h", text, "since 0.", CGRT_VERSION_MINOR);
  assert_int_equal(highest, CGRT_VERSION_MINOR);
  char want[64];
  snprintf(want, sizeof(want), "%d.%d.%d", CGRT_VERSION_MAJOR, CGRT_VERSION_MINOR,
           CGRT_VERSION_PATCH);
  assert_string_equal(CGRT_VERSION_STRING, want);
  free(text);
}

static void view_has_reads_struct_size(void **state) {
  (void)state;
  struct cgrt_config_view v;
  memset(&v, 0, sizeof(v));
  v.struct_size = sizeof(v);
  assert_true(CGRT_VIEW_HAS(&v, cp_scope));
  /* a view made by a core of minor 0 ends after get() */
  v.struct_size = (uint32_t)(offsetof(struct cgrt_config_view, get) + sizeof(v.get));
  assert_true(CGRT_VIEW_HAS(&v, warmup_steps));
  assert_false(CGRT_VIEW_HAS(&v, adapt_interval));
  assert_false(CGRT_VIEW_HAS(&v, cp_scope));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(backend_h_labels_match_host_api_minor),
      cmocka_unit_test(cgrt_h_labels_match_version_minor),
      cmocka_unit_test(view_has_reads_struct_size),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
