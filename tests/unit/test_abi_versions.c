/*
 * test_abi_versions.c - the version labels of the public headers can be trusted: every group
 * appended to a struct or enum says `since minor N` (backend.h) or `since 0.N` (cgrt.h, types.h),
 * no label names a version above the header's own constant, the newest label is that constant,
 * and no vague label ("appended after", "later") is left. CGRT_VIEW_HAS answers by struct_size.
 * And the packaging facts the headers carry (issue 40): struct_size has one type per ABI (size_t
 * in the host API's structs, uint32_t in the backend ABI's), backend.h reaches no declaration of
 * libcgrt, and the README's table of releases gives this release's host API minor.
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
#include "cgrt/cgrt.h"

/* The text of a file of the source tree, by its path there (malloc'ed). */
static char *read_source(const char *rel) {
  const char *src = getenv("CGRT_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", src ? src : ".", rel);
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

/* The text of a header under core/include/cgrt of the source tree (malloc'ed). */
static char *read_header(const char *name) {
  char rel[256];
  snprintf(rel, sizeof(rel), "core/include/cgrt/%s", name);
  return read_source(rel);
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
  /* types.h holds what cgrt.h shares with backend.h, labelled the same way */
  int highest = -1;
  static const char *const headers[] = {"cgrt.h", "types.h"};
  for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
    char *text = read_header(headers[i]);
    assert_no_vague_label(headers[i], text);
    int h = check_labels(headers[i], text, "since 0.", CGRT_VERSION_MINOR);
    if (h > highest)
      highest = h;
    free(text);
  }
  assert_int_equal(highest, CGRT_VERSION_MINOR);
  char want[64];
  snprintf(want, sizeof(want), "%d.%d.%d", CGRT_VERSION_MAJOR, CGRT_VERSION_MINOR,
           CGRT_VERSION_PATCH);
  assert_string_equal(CGRT_VERSION_STRING, want);
}

/*
 * Every `struct_size;` member of `name` is declared with `type`; returns how many there are. The
 * type of a published struct's first field is its ABI: each ABI keeps the one it started with.
 */
static int struct_sizes_of_type(const char *name, const char *type) {
  char *text = read_header(name);
  int count = 0;
  const char *member = "struct_size;";
  for (const char *p = strstr(text, member); p; p = strstr(p + 1, member)) {
    const char *line = p;
    while (line > text && line[-1] != '\n')
      line--;
    while (*line == ' ')
      line++;
    size_t n = strlen(type);
    if (strncmp(line, type, n) != 0 || line[n] != ' ' || line + n + 1 != p)
      fail_msg("%s:%d: struct_size is not declared `%s struct_size;` (%.*s)", name,
               line_of(text, p), type, (int)(p - line) + (int)strlen(member), line);
    count++;
  }
  free(text);
  return count;
}

static void struct_size_has_one_type_per_abi(void **state) {
  (void)state;
  /* host API (cgrt.h, and the types it shares with backends): size_t since 0.1 */
  assert_true(struct_sizes_of_type("cgrt.h", "size_t") >= 5);
  assert_true(struct_sizes_of_type("types.h", "size_t") >= 5);
  /* backend ABI v1: uint32_t since minor 0 (tests/fixtures/abi/backend_v1_0.h) */
  assert_true(struct_sizes_of_type("backend.h", "uint32_t") >= 5);
  struct cgrt_backend_v1 b;
  struct cgrt_host_api h;
  cgrt_ctx c;
  assert_int_equal(sizeof(b.struct_size), 4);
  assert_int_equal(sizeof(h.struct_size), 4);
  assert_int_equal(sizeof(c.struct_size), sizeof(size_t));
}

/* What a backend includes declares nothing of libcgrt (tests/sdk/run.sh compiles it too). */
static void backend_h_reaches_no_host_function(void **state) {
  (void)state;
  static const char *const headers[] = {"backend.h", "types.h"};
  for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
    char *text = read_header(headers[i]);
    const char *p = strstr(text, "CGRT_API");
    if (p)
      fail_msg("%s:%d: a function of libcgrt: a backend must not see it", headers[i],
               line_of(text, p));
    const char *inc = strstr(text, "#include \"cgrt.h\"");
    if (!inc)
      inc = strstr(text, "#include <cgrt/cgrt.h>");
    if (inc)
      fail_msg("%s:%d: includes cgrt.h, whose functions a backend must not call", headers[i],
               line_of(text, inc));
    free(text);
  }
  assert_string_equal(cgrt_status_text(CGRT_E_VERIFY), cgrt_strerror(CGRT_E_VERIFY));
  assert_string_equal(cgrt_status_text(12345), "unknown error");
}

/* README's "Versions": the row of this release names this header's host API minor. */
static void readme_maps_this_release_to_its_minor(void **state) {
  (void)state;
  char *text = read_source("README.md");
  char row[64];
  snprintf(row, sizeof(row), "\n| %s | %d |", CGRT_VERSION_STRING, CGRT_HOST_API_MINOR);
  if (!strstr(text, row))
    fail_msg("README.md has no row '%s' in its table of releases (section Versions): add the "
             "release with the host API minor it carries",
             row + 1);
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
      cmocka_unit_test(struct_size_has_one_type_per_abi),
      cmocka_unit_test(backend_h_reaches_no_host_function),
      cmocka_unit_test(readme_maps_this_release_to_its_minor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
