/* bench_plot.c - the SVG chart of `cgrt bench --plot` (bench_plot.h). */
#include "bench_plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Canvas and plot area, in SVG user units. */
#define W      840.0
#define H      460.0
#define LEFT   80.0
#define RIGHT  240.0 /* room for the legend */
#define TOP    50.0
#define BOTTOM 60.0

static int usable(double v) {
  return isfinite(v) && v > 0;
}

/* Writes s with &, <, >, " escaped. */
static void put_text(FILE *f, const char *s) {
  for (; s && *s; s++)
    switch (*s) {
    case '&':
      fputs("&amp;", f);
      break;
    case '<':
      fputs("&lt;", f);
      break;
    case '>':
      fputs("&gt;", f);
      break;
    case '"':
      fputs("&quot;", f);
      break;
    default:
      fputc(*s, f);
    }
}

/* A "nice" step (1, 2 or 5 times a power of ten) giving about `ticks` intervals up to max. */
static double nice_step(double max, int ticks) {
  double raw = max / ticks, p = pow(10.0, floor(log10(raw))), m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

struct axes {
  double x0, x1, ymax;
  int logx;
};

static double px(const struct axes *a, double x) {
  double t = 0.5; /* a single x: the middle */
  if (a->x1 > a->x0)
    t = a->logx ? (log2(x) - log2(a->x0)) / (log2(a->x1) - log2(a->x0))
                : (x - a->x0) / (a->x1 - a->x0);
  return LEFT + t * (W - LEFT - RIGHT);
}

static double py(const struct axes *a, double y) {
  return H - BOTTOM - y / a->ymax * (H - TOP - BOTTOM);
}

static void fmt_num(char *buf, size_t len, double v) {
  if (v == floor(v) && fabs(v) < 1e9)
    snprintf(buf, len, "%.0f", v);
  else
    snprintf(buf, len, "%g", v);
}

int bench_plot_svg(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const double *x, int n, const struct plot_series *s, int ns, char *err,
                   size_t errlen) {
  struct axes a = {0, 0, 0, 0};
  int points = 0;
  for (int i = 0; i < n; i++) {
    if (!usable(x[i]))
      continue;
    if (a.x0 == 0 || x[i] < a.x0)
      a.x0 = x[i];
    if (x[i] > a.x1)
      a.x1 = x[i];
    for (int k = 0; k < ns; k++)
      if (usable(s[k].y[i])) {
        points++;
        if (s[k].y[i] > a.ymax)
          a.ymax = s[k].y[i];
      }
  }
  if (points == 0) {
    snprintf(err, errlen, "--plot %s: nothing to plot (no positive value)", path);
    return -1;
  }
  a.logx = a.x1 > 8 * a.x0;
  const double ystep = nice_step(a.ymax * 1.05, 6);
  a.ymax = ceil(a.ymax * 1.05 / ystep) * ystep;
  FILE *f = fopen(path, "w");
  if (!f) {
    snprintf(err, errlen, "--plot %s: %s", path, strerror(errno));
    return -1;
  }
  fprintf(f,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, H, W, H);
  /* left-aligned: a long title centred over the plot would run off the left edge */
  fprintf(f, "<text x=\"12\" y=\"24\" font-size=\"14\">");
  put_text(f, title);
  fprintf(f, "</text>\n");
  /* Grid and y ticks. */
  char num[32];
  for (double y = 0; y <= a.ymax * (1 + 1e-9); y += ystep) {
    fmt_num(num, sizeof(num), y);
    fprintf(f,
            "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
            "stroke=\"#dddddd\"/>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
            LEFT, py(&a, y), W - RIGHT, py(&a, y), LEFT - 6, py(&a, y) + 4, num);
  }
  /* x ticks: every x given. */
  for (int i = 0; i < n; i++) {
    if (!usable(x[i]))
      continue;
    fmt_num(num, sizeof(num), x[i]);
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
            px(&a, x[i]), H - BOTTOM, px(&a, x[i]), H - BOTTOM + 5, px(&a, x[i]), H - BOTTOM + 19,
            num);
  }
  /* Axes and their labels. */
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
          LEFT, H - BOTTOM, W - RIGHT, H - BOTTOM, LEFT, TOP, LEFT, H - BOTTOM);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (LEFT + W - RIGHT) / 2, H - 18);
  put_text(f, xlabel);
  fprintf(f, "%s</text>\n", a.logx ? " (log scale)" : "");
  fprintf(f, "<text x=\"20\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 20 %.1f)\">",
          (TOP + H - BOTTOM) / 2, (TOP + H - BOTTOM) / 2);
  put_text(f, ylabel);
  fprintf(f, "</text>\n");
  /* Series, then the legend. */
  for (int k = 0; k < ns; k++) {
    fprintf(f, "<g class=\"series\" data-name=\"");
    put_text(f, s[k].name);
    fprintf(f, "\">\n<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
            s[k].color, s[k].dashed ? " stroke-dasharray=\"6 4\"" : "");
    for (int i = 0; i < n; i++)
      if (usable(x[i]) && usable(s[k].y[i]))
        fprintf(f, "%.1f,%.1f ", px(&a, x[i]), py(&a, s[k].y[i]));
    fprintf(f, "\"/>\n");
    for (int i = 0; i < n; i++)
      if (usable(x[i]) && usable(s[k].y[i]))
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(&a, x[i]),
                py(&a, s[k].y[i]), s[k].color);
    fprintf(f, "</g>\n");
    const double ly = TOP + 10 + 20 * k, lx = W - RIGHT + 16;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"2\"%s/>\n<text x=\"%.1f\" y=\"%.1f\">",
            lx, ly, lx + 24, ly, s[k].color, s[k].dashed ? " stroke-dasharray=\"6 4\"" : "",
            lx + 30, ly + 4);
    put_text(f, s[k].name);
    fprintf(f, "</text>\n");
  }
  fprintf(f, "</svg>\n");
  if (fclose(f) != 0) {
    snprintf(err, errlen, "--plot %s: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}
