/* A small scatter-and-lines plot for fathom eval --plot: labelled points
 * and named curves on axes that turn logarithmic when the values span more
 * than a decade, labels placed so that they do not collide. Written as SVG,
 * or as PNG through cairo when the file name ends in .png (and the CLI was
 * built with cairo). */
#ifndef FATHOM_CLI_PLOT_H
#define FATHOM_CLI_PLOT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct plot_point {
    const char *label;
    double x, y;
} plot_point;

typedef struct plot_series {
    const char *label;
    const double *x, *y; /* [n], in drawing order */
    uint32_t n;
} plot_series;

typedef struct plot_spec {
    const char *title, *x_label, *y_label;
    const plot_point *points; /* points with x or y <= 0 are left out */
    uint32_t n_points;
    const plot_series *series;
    uint32_t n_series;
} plot_spec;

/* Whether this build writes PNG (cairo). */
bool plot_png_supported(void);
/* Before any work: the format the name asks for can be written, and the
 * file can be created. CLI_OK, or CLI_USAGE (.png without cairo) /
 * CLI_FAILURE (not writable) after a message. */
int plot_check_path(const char *path);
/* CLI_OK, or CLI_FAILURE after a message. */
int plot_write(const char *path, const plot_spec *spec);

#endif
