/* A small plot as SVG or (with cairo) PNG (plot.h). The drawing is
 * described once against a canvas of a few primitives; the SVG backend
 * prints them as elements, the cairo backend paints them. */
#include "plot.h"
#include "cli_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef FATHOM_HAVE_CAIRO
#include <cairo.h>
#endif
#ifdef FATHOM_HAVE_FONTCONFIG
#include <fontconfig/fontconfig.h>
#endif

/* ---- canvas ---- */

enum { ANCHOR_START, ANCHOR_MIDDLE, ANCHOR_END };

typedef struct canvas {
    FILE *svg; /* the SVG backend, or NULL */
#ifdef FATHOM_HAVE_CAIRO
    cairo_surface_t *surface;
    cairo_t *cr;
#endif
} canvas;

static const double FONT = 12.0;
static const double PI = 3.14159265358979323846;

/* Width of text at font size `size`: an estimate for a sans-serif face,
 * the same for both backends so that the layout does not depend on them. */
static double text_width(const char *s, double size) { return 0.58 * size * (double)strlen(s); }

#ifdef FATHOM_HAVE_CAIRO
static void cairo_color(cairo_t *cr, const char *hex) {
    unsigned v = (unsigned)strtoul(hex + 1, NULL, 16);
    cairo_set_source_rgb(cr, ((v >> 16) & 255) / 255.0, ((v >> 8) & 255) / 255.0, (v & 255) / 255.0);
}
#endif

static void svg_text_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

static void draw_line(canvas *c, double x1, double y1, double x2, double y2, const char *color,
                      double width) {
    if (c->svg) {
        fprintf(c->svg,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"/>\n",
                x1, y1, x2, y2, color, width);
        return;
    }
#ifdef FATHOM_HAVE_CAIRO
    cairo_color(c->cr, color);
    cairo_set_line_width(c->cr, width);
    cairo_move_to(c->cr, x1, y1);
    cairo_line_to(c->cr, x2, y2);
    cairo_stroke(c->cr);
#endif
}

static void draw_polyline(canvas *c, const double *xs, const double *ys, uint32_t n, const char *color,
                          double width) {
    if (n == 0) return;
    if (c->svg) {
        fprintf(c->svg, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" points=\"", color, width);
        for (uint32_t i = 0; i < n; i++) fprintf(c->svg, "%s%.1f,%.1f", i ? " " : "", xs[i], ys[i]);
        fprintf(c->svg, "\"/>\n");
        return;
    }
#ifdef FATHOM_HAVE_CAIRO
    cairo_color(c->cr, color);
    cairo_set_line_width(c->cr, width);
    cairo_move_to(c->cr, xs[0], ys[0]);
    for (uint32_t i = 1; i < n; i++) cairo_line_to(c->cr, xs[i], ys[i]);
    cairo_stroke(c->cr);
#endif
}

static void draw_circle(canvas *c, double x, double y, double r, const char *color) {
    if (c->svg) {
        fprintf(c->svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\"/>\n", x, y, r, color);
        return;
    }
#ifdef FATHOM_HAVE_CAIRO
    cairo_color(c->cr, color);
    cairo_arc(c->cr, x, y, r, 0, 2 * PI);
    cairo_fill(c->cr);
#endif
}

static void draw_rect(canvas *c, double x, double y, double w, double h, const char *stroke,
                      const char *fill) {
    if (c->svg) {
        fprintf(c->svg, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"%s\"/>\n",
                x, y, w, h, fill ? fill : "none", stroke ? stroke : "none");
        return;
    }
#ifdef FATHOM_HAVE_CAIRO
    cairo_rectangle(c->cr, x, y, w, h);
    if (fill) {
        cairo_color(c->cr, fill);
        cairo_fill_preserve(c->cr);
    }
    if (stroke) {
        cairo_color(c->cr, stroke);
        cairo_set_line_width(c->cr, 1.0);
        cairo_stroke_preserve(c->cr);
    }
    cairo_new_path(c->cr);
#endif
}

/* Text with its baseline at y; `vertical` turns it 90° counter-clockwise
 * about (x, y). */
static void draw_text(canvas *c, double x, double y, const char *s, int anchor, double size,
                      bool vertical, const char *color) {
    if (c->svg) {
        static const char *const anchors[] = {"start", "middle", "end"};
        fprintf(c->svg, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" fill=\"%s\" text-anchor=\"%s\"", x, y,
                size, color, anchors[anchor]);
        if (vertical) fprintf(c->svg, " transform=\"rotate(-90 %.1f %.1f)\"", x, y);
        fputc('>', c->svg);
        svg_text_escaped(c->svg, s);
        fputs("</text>\n", c->svg);
        return;
    }
#ifdef FATHOM_HAVE_CAIRO
    cairo_t *cr = c->cr;
    cairo_save(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
    cairo_text_extents_t ext;
    cairo_text_extents(cr, s, &ext);
    const double shift = anchor == ANCHOR_START ? 0 : anchor == ANCHOR_MIDDLE ? ext.x_advance / 2 : ext.x_advance;
    cairo_translate(cr, x, y);
    if (vertical) cairo_rotate(cr, -PI / 2);
    cairo_move_to(cr, -shift, 0);
    cairo_color(cr, color);
    cairo_show_text(cr, s);
    cairo_restore(cr);
#endif
}

/* ---- axes ---- */

typedef struct axis {
    double lo, hi;  /* data range shown */
    bool log;       /* logarithmic (the values span more than a decade) */
    double p0, p1;  /* pixels of lo and hi */
} axis;

static double axis_px(const axis *a, double v) {
    const double t = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo))
                            : (v - a->lo) / (a->hi - a->lo);
    return a->p0 + t * (a->p1 - a->p0);
}

/* The range: on a log axis out to the nearest 1, 2 or 5 times a power of
 * ten; on a linear one to a multiple of a 1-2-5 step. */
static void axis_fit(axis *a, double vmin, double vmax) {
    a->log = vmax > 10 * vmin;
    if (a->log) {
        static const double m[] = {1, 2, 5, 10};
        double d = pow(10, floor(log10(vmin)));
        a->lo = d;
        for (int i = 2; i >= 0; i--)
            if (m[i] * d <= vmin * (1 + 1e-12)) {
                a->lo = m[i] * d;
                break;
            }
        d = pow(10, floor(log10(vmax)));
        a->hi = 10 * d;
        for (int i = 0; i < 4; i++)
            if (m[i] * d >= vmax * (1 - 1e-12)) {
                a->hi = m[i] * d;
                break;
            }
        return;
    }
    double span = vmax - vmin > 0 ? vmax - vmin : fabs(vmax) > 0 ? fabs(vmax) : 1;
    double step = pow(10, floor(log10(span / 5)));
    if (span / step > 20) step *= 5;
    else if (span / step > 10) step *= 2;
    a->lo = floor(vmin / step) * step;
    a->hi = ceil(vmax / step) * step;
    if (a->hi <= a->lo) a->hi = a->lo + step;
}

static void format_tick(double v, char *buf, size_t cap) {
    if (v != 0 && (fabs(v) < 1e-3 || fabs(v) >= 1e5)) snprintf(buf, cap, "%.0e", v);
    else snprintf(buf, cap, "%g", v);
}

/* Ticks and their labels along one axis (horizontal: x along the bottom);
 * a label is left out where it would touch the previous one. */
static void draw_ticks(canvas *c, const axis *a, bool horizontal, double at) {
    double vals[256];
    int major[256];
    int n = 0;
    if (a->log) {
        const int d0 = (int)floor(log10(a->lo) + 1e-9), d1 = (int)ceil(log10(a->hi) - 1e-9);
        const bool few = log10(a->hi / a->lo) <= 2.5; /* label 2 and 5 too when few decades show */
        for (int d = d0; d <= d1 && n < 256; d++)
            for (int m = 1; m <= 9 && n < 256; m++) {
                const double v = m * pow(10, d);
                if (v < a->lo * (1 - 1e-9) || v > a->hi * (1 + 1e-9)) continue;
                vals[n] = v;
                major[n++] = m == 1 ? 2 : (few && (m == 2 || m == 5)) ? 1 : 0;
            }
    } else {
        double span = a->hi - a->lo, step = pow(10, floor(log10(span / 5)));
        if (span / step > 20) step *= 5;
        else if (span / step > 10) step *= 2;
        for (double v = a->lo; v <= a->hi + step * 1e-9 && n < 256; v += step) {
            vals[n] = v;
            major[n++] = 2;
        }
    }
    double last_end = -1e9;
    for (int i = 0; i < n; i++) {
        const double p = axis_px(a, vals[i]), len = major[i] ? 6 : 3;
        if (horizontal) draw_line(c, p, at, p, at + len, "#000000", 1);
        else draw_line(c, at - len, p, at, p, "#000000", 1);
        if (!major[i]) continue;
        char label[32];
        format_tick(vals[i], label, sizeof label);
        const double w = horizontal ? text_width(label, FONT) : FONT;
        const double lo = (horizontal ? p : -p) - w / 2, hi = lo + w;
        if (lo < last_end + 4) continue;
        last_end = hi;
        if (horizontal) draw_text(c, p, at + 8 + FONT, label, ANCHOR_MIDDLE, FONT, false, "#000000");
        else draw_text(c, at - 8, p + FONT / 3, label, ANCHOR_END, FONT, false, "#000000");
    }
}

/* ---- label placement ---- */

typedef struct box {
    double x0, y0, x1, y1;
} box;

static bool overlaps(const box *a, const box *b) {
    return a->x0 < b->x1 && b->x0 < a->x1 && a->y0 < b->y1 && b->y0 < a->y1;
}

static bool box_free(const box *b, const box *taken, uint32_t n_taken, const box *area) {
    if (b->x0 < area->x0 || b->x1 > area->x1 || b->y0 < area->y0 || b->y1 > area->y1) return false;
    for (uint32_t i = 0; i < n_taken; i++)
        if (overlaps(b, &taken[i])) return false;
    return true;
}

typedef struct boxes {
    box *v;
    uint32_t n, cap;
} boxes;

/* Adds b (silently dropped when out of memory: a label may then overlap). */
static void take(boxes *t, box b) {
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? 2 * t->cap : 256;
        box *bigger = realloc(t->v, cap * sizeof *bigger);
        if (!bigger) return;
        t->v = bigger;
        t->cap = cap;
    }
    t->v[t->n++] = b;
}

/* ---- the plot ---- */

static const char *const point_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b",
                                           "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#ff7f0e"};
static const char *const series_colors[] = {"#000000", "#ff7f0e", "#1f77b4", "#2ca02c"};

static void draw(canvas *c, const plot_spec *s, double W, double H) {
    double legend = 0;
    for (uint32_t k = 0; k < s->n_series; k++) legend = fmax(legend, text_width(s->series[k].label, FONT));
    const double left = 78, right = W - (legend > 0 ? legend + 66 : 20), top = 34, bottom = H - 56;
    double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0;
#define TAKE(x, y)                                                                                 \
    do {                                                                                           \
        if ((x) > 0 && (y) > 0 && isfinite(x) && isfinite(y)) {                                    \
            xmin = fmin(xmin, x), xmax = fmax(xmax, x), ymin = fmin(ymin, y), ymax = fmax(ymax, y); \
        }                                                                                          \
    } while (0)
    for (uint32_t i = 0; i < s->n_points; i++) TAKE(s->points[i].x, s->points[i].y);
    for (uint32_t k = 0; k < s->n_series; k++)
        for (uint32_t i = 0; i < s->series[k].n; i++) TAKE(s->series[k].x[i], s->series[k].y[i]);
#undef TAKE
    if (!(xmax > 0)) xmin = 1, xmax = 10, ymin = 0.01, ymax = 1;
    axis ax = {0}, ay = {0};
    axis_fit(&ax, xmin, xmax);
    axis_fit(&ay, ymin, ymax);
    ax.p0 = left, ax.p1 = right;
    ay.p0 = bottom, ay.p1 = top;

    draw_rect(c, 0, 0, W, H, NULL, "#ffffff");
    if (s->title) draw_text(c, (left + right) / 2, 20, s->title, ANCHOR_MIDDLE, 13, false, "#000000");
    draw_rect(c, left, top, right - left, bottom - top, "#000000", NULL);
    draw_ticks(c, &ax, true, bottom);
    draw_ticks(c, &ay, false, left);
    char xl[160], yl[160];
    snprintf(xl, sizeof xl, "%s%s", s->x_label, ax.log ? " (log scale)" : "");
    snprintf(yl, sizeof yl, "%s%s", s->y_label, ay.log ? " (log scale)" : "");
    draw_text(c, (left + right) / 2, H - 12, xl, ANCHOR_MIDDLE, FONT, false, "#000000");
    draw_text(c, 18, (top + bottom) / 2, yl, ANCHOR_MIDDLE, FONT, true, "#000000");

    /* what labels must not cover: markers and the curves (boxes every few pixels along them) */
    boxes taken = {0};
    /* curves, and their legend right of the plot */
    for (uint32_t k = 0; k < s->n_series; k++) {
        const plot_series *r = &s->series[k];
        double *px = malloc((r->n + 1) * sizeof *px), *py = malloc((r->n + 1) * sizeof *py);
        uint32_t m = 0;
        const char *color = series_colors[k % 4];
        for (uint32_t i = 0; px && py && i < r->n; i++)
            if (r->x[i] > 0 && r->y[i] > 0) {
                px[m] = axis_px(&ax, r->x[i]);
                py[m++] = axis_px(&ay, r->y[i]);
            }
        draw_polyline(c, px, py, m, color, 2);
        for (uint32_t i = 0; i < m; i++) {
            draw_circle(c, px[i], py[i], 2.5, color);
            if (i + 1 == m) break;
            const double len = hypot(px[i + 1] - px[i], py[i + 1] - py[i]);
            for (double t = 0; t <= len; t += 4) {
                const double bx = px[i] + (px[i + 1] - px[i]) * t / len, by = py[i] + (py[i + 1] - py[i]) * t / len;
                take(&taken, (box){bx - 3, by - 3, bx + 3, by + 3});
            }
        }
        if (m == 1) take(&taken, (box){px[0] - 3, py[0] - 3, px[0] + 3, py[0] + 3});
        free(px);
        free(py);
        const double ly = top + 10 + 18 * k;
        draw_line(c, right + 14, ly - 4, right + 40, ly - 4, color, 2);
        draw_text(c, right + 46, ly, r->label, ANCHOR_START, FONT, false, "#000000");
    }

    /* points, then their labels where they touch nothing placed before */
    const uint32_t n = s->n_points;
    const box area = {left + 2, top + 2, right - 2, bottom - 2};
    for (uint32_t i = 0; i < n; i++) {
        const plot_point *p = &s->points[i];
        if (!(p->x > 0 && p->y > 0)) continue;
        const double x = axis_px(&ax, p->x), y = axis_px(&ay, p->y);
        draw_circle(c, x, y, 4, point_colors[i % 10]);
        take(&taken, (box){x - 5, y - 5, x + 5, y + 5});
    }
    for (uint32_t i = 0; i < n; i++) {
        const plot_point *p = &s->points[i];
        if (!(p->x > 0 && p->y > 0)) continue;
        const double x = axis_px(&ax, p->x), y = axis_px(&ay, p->y);
        const double w = text_width(p->label, FONT), h = FONT + 2;
        box best = {x + 7, y - h / 2, x + 7 + w, y + h / 2};
        bool placed = false, leader = false;
        /* right, left, above, below; then right and left a row further out each time */
        for (int ring = 0; ring < 12 && !placed; ring++) {
            const double dy = ring == 0 ? 0 : (ring % 2 ? -1 : 1) * h * (double)((ring + 1) / 2);
            const box cand[4] = {
                {x + 7, y + dy - h / 2, x + 7 + w, y + dy + h / 2},
                {x - 7 - w, y + dy - h / 2, x - 7, y + dy + h / 2},
                {x - w / 2, y - 7 - h + dy, x + w / 2, y - 7 + dy},
                {x - w / 2, y + 7 + dy, x + w / 2, y + 7 + h + dy},
            };
            for (int k = 0; k < 4 && !placed; k++)
                if (box_free(&cand[k], taken.v, taken.n, &area)) {
                    best = cand[k];
                    placed = true;
                    leader = ring > 1;
                }
        }
        if (leader) {
            const double bx = best.x0 > x ? best.x0 : best.x1, by = (best.y0 + best.y1) / 2;
            draw_line(c, x, y, bx, by, "#999999", 0.8);
        }
        take(&taken, best);
        draw_text(c, best.x0, best.y1 - 3, p->label, ANCHOR_START, FONT, false, point_colors[i % 10]);
    }
    free(taken.v);
}

bool plot_png_supported(void) {
#ifdef FATHOM_HAVE_CAIRO
    return true;
#else
    return false;
#endif
}

static bool wants_png(const char *path) {
    const size_t n = strlen(path);
    return n >= 4 && !strcasecmp(path + n - 4, ".png");
}

int plot_check_path(const char *path) {
    if (wants_png(path) && !plot_png_supported())
        return cli_usage_error("--plot %s: this fathom was built without cairo and writes SVG "
                               "only; name the file .svg (or rebuild with libcairo2-dev)",
                               path);
    return cli_check_writable(path) ? CLI_OK : CLI_FAILURE;
}

int plot_write(const char *path, const plot_spec *spec) {
    const double W = 820, H = 540;
    canvas c = {0};
    if (!wants_png(path)) {
        if (!(c.svg = fopen(path, "w"))) {
            cli_error("cannot write %s", path);
            return CLI_FAILURE;
        }
        fprintf(c.svg,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\">\n",
                W, H);
        draw(&c, spec, W, H);
        fprintf(c.svg, "</svg>\n");
        if (fclose(c.svg) != 0) {
            cli_error("write error on %s", path);
            return CLI_FAILURE;
        }
        return CLI_OK;
    }
#ifdef FATHOM_HAVE_CAIRO
    const double scale = 2; /* twice the pixels, for a sharp image */
    c.surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)(W * scale), (int)(H * scale));
    c.cr = cairo_create(c.surface);
    cairo_scale(c.cr, scale, scale);
    draw(&c, spec, W, H);
    cairo_surface_flush(c.surface);
    cairo_status_t st = cairo_status(c.cr);
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_write_to_png(c.surface, path);
    cairo_destroy(c.cr);
    cairo_surface_destroy(c.surface);
    /* cairo's and fontconfig's process-wide caches, released: one plot per run */
    cairo_debug_reset_static_data();
#ifdef FATHOM_HAVE_FONTCONFIG
    FcFini();
#endif
    if (st != CAIRO_STATUS_SUCCESS) {
        cli_error("cannot write %s: %s", path, cairo_status_to_string(st));
        return CLI_FAILURE;
    }
    return CLI_OK;
#else
    cli_error("cannot write %s: built without cairo, SVG only", path);
    return CLI_FAILURE;
#endif
}
