/*
 * test_plot.c - the SVG chart of `cgrt bench --plot` (tools/bench/bench_plot.c): a complete
 * document, one polyline per series with a point per usable value (gaps left out), larger values
 * drawn higher, every point inside the plot area, x on a log scale only when it spans more than
 * 8x, text escaped, and a clear refusal when there is nothing to plot or the file cannot be
 * written.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bench_plot.h"

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

/* The points of the polyline of series `name`: xs/ys, their count returned. */
static int points_of(const char *svg, const char *name, double *xs, double *ys, int cap) {
  char key[128];
  snprintf(key, sizeof(key), "data-name=\"%s\"", name);
  const char *g = strstr(svg, key);
  assert_non_null(g);
  const char *p = strstr(g, "points=\"");
  assert_non_null(p);
  p += 8;
  int n = 0;
  while (*p && *p != '"') {
    char *end;
    double x = strtod(p, &end);
    if (end == p)
      break;
    assert_true(*end == ',');
    double y = strtod(end + 1, &end);
    assert_true(n < cap);
    xs[n] = x;
    ys[n] = y;
    n++;
    p = end;
    while (*p == ' ')
      p++;
  }
  return n;
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
    n++;
  return n;
}

static void chart_is_complete_and_right(void **state) {
  (void)state;
  const double x[5] = {1, 3, 8, 37, 64};
  const double eager[5] = {800, 790, 760, 720, 700};
  const double cgrt[5] = {430, 0, 450, 680, 690}; /* a gap at 3 tokens */
  const double none[5] = {0, 0, 0, 0, 0};
  const struct plot_series s[3] = {
      {"eager", "#d62728", eager, 0}, {"cgrt", "#1f77b4", cgrt, 0}, {"limit", "#777", none, 1}};
  char path[] = "/tmp/cgrt_test_plot_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  char err[256] = "";
  assert_int_equal(bench_plot_svg(path, "decode <12 layers> & co", "tokens per step",
                                  "step time (us)", x, 5, s, 3, err, sizeof(err)),
                   0);
  const char *svg = slurp(path);
  assert_true(strncmp(svg, "<?xml", 5) == 0);
  assert_non_null(strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
  assert_true(strcmp(svg + strlen(svg) - 7, "</svg>\n") == 0);
  assert_non_null(strstr(svg, "decode &lt;12 layers&gt; &amp; co"));
  assert_null(strstr(svg, "<12 layers>"));
  assert_int_equal(count(svg, "class=\"series\""), 3);
  assert_non_null(strstr(svg, "tokens per step (log scale)"));
  assert_non_null(strstr(svg, ">limit</text>")); /* in the legend, though it has no point */

  double xs[8], ys[8], xc[8], yc[8], xl[8], yl[8];
  assert_int_equal(points_of(svg, "eager", xs, ys, 8), 5);
  assert_int_equal(points_of(svg, "cgrt", xc, yc, 8), 4);
  assert_int_equal(points_of(svg, "limit", xl, yl, 8), 0);
  for (int i = 0; i < 5; i++) {
    assert_true(xs[i] >= 80 && xs[i] <= 840 - 240); /* the plot area */
    assert_true(ys[i] >= 50 && ys[i] <= 460 - 60);
    if (i > 0) {
      assert_true(xs[i] > xs[i - 1]);
      assert_true(ys[i] > ys[i - 1]); /* eager falls: drawn lower each time (svg y grows down) */
    }
  }
  /* Same x positions for the same token counts across series; larger value, higher point. */
  assert_true(xc[0] == xs[0] && xc[1] == xs[2]);
  assert_true(yc[0] > ys[0]); /* 430 below 800 */
  /* Log scale: 1 -> 8 spans three doublings as 8 -> 64 does. */
  double d1 = xs[2] - xs[0], d2 = xs[4] - xs[2];
  assert_true(d1 > d2 - 0.5 && d1 < d2 + 0.5);
  unlink(path);

  /* Linear x when it spans 8x or less. */
  const double x2[3] = {2, 4, 8};
  assert_int_equal(bench_plot_svg(path, "t", "tokens", "us", x2, 3, s, 1, err, sizeof(err)), 0);
  svg = slurp(path);
  assert_null(strstr(svg, "(log scale)"));
  assert_int_equal(points_of(svg, "eager", xs, ys, 8), 3);
  assert_true(xs[1] - xs[0] < xs[2] - xs[1]); /* 2 -> 4 is half of 4 -> 8 */
  unlink(path);
}

static void refusals_say_why(void **state) {
  (void)state;
  const double x[2] = {1, 2}, zero[2] = {0, 0}, one[2] = {1, 2};
  const struct plot_series none = {"none", "#000", zero, 0}, some = {"some", "#000", one, 0};
  char err[256] = "";
  assert_int_equal(
      bench_plot_svg("/tmp/cgrt_never.svg", "t", "x", "y", x, 2, &none, 1, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "nothing to plot"));
  assert_int_equal(
      bench_plot_svg("/nonexistent/dir/p.svg", "t", "x", "y", x, 2, &some, 1, err, sizeof(err)),
      -1);
  assert_non_null(strstr(err, "/nonexistent/dir/p.svg"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chart_is_complete_and_right),
      cmocka_unit_test(refusals_say_why),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
