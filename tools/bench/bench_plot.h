/*
 * bench_plot.h - a self-contained SVG line chart (no plotting dependency): `cgrt bench --plot`.
 */
#ifndef CGRT_TOOLS_BENCH_PLOT_H
#define CGRT_TOOLS_BENCH_PLOT_H

#include <stddef.h>

/* One line of the chart: y[i] at x[i]; a value <= 0 or not finite is left out (a gap). */
struct plot_series {
  const char *name;  /* in the legend */
  const char *color; /* an SVG colour: "#1f77b4" */
  const double *y;
  int dashed;
};

/*
 * Writes to `path` an SVG chart of the series over x[0..n) (ascending, > 0): axes with ticks and
 * labels, a title, a legend, one polyline with a marker per point for each series. The x axis is
 * logarithmic (base 2) when x spans more than a factor 8, linear otherwise; the y axis is linear
 * from 0. Text is XML-escaped. Returns 0, or -1 with a sentence in err (nothing to plot, the file
 * cannot be written).
 */
int bench_plot_svg(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const double *x, int n, const struct plot_series *s, int ns, char *err,
                   size_t errlen);

#endif
