/* Helpers every fathom command shares (cli_util.h). */
#include "cli_util.h"
#include "fathom.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- messages ---- */

static const char *command_name = "";

void cli_set_command(const char *name) { command_name = name ? name : ""; }
const char *cli_command(void) { return command_name; }

/* The arguments (paths, values from files) are the user's or a file's: the
 * formatted message goes out through cli_print_safe. */
static void vmessage(const char *kind, const char *fmt, va_list ap) {
    char small[1024], *text = small;
    va_list again;
    va_copy(again, ap);
    const int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n >= (int)sizeof small && (text = malloc((size_t)n + 1)) != NULL) vsnprintf(text, (size_t)n + 1, fmt, again);
    va_end(again);
    fprintf(stderr, "fathom%s%s: %s", command_name[0] ? " " : "", command_name, kind);
    cli_print_safe(stderr, text ? text : small); /* cut at 1023 bytes without memory */
    fputc('\n', stderr);
    if (text != small) free(text);
}

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage("", fmt, ap);
    va_end(ap);
}

void cli_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage("warning: ", fmt, ap);
    va_end(ap);
}

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage("", fmt, ap);
    va_end(ap);
    fprintf(stderr, "(fathom %s --help for usage)\n", command_name);
    return CLI_USAGE;
}

/* The library's message past its leading "name: " prefixes, where a name is
 * an identifier (lower case, digits, '_'): the C function or module that
 * raised it, which means nothing to a user of the command line. */
static const char *user_message(void) {
    const char *m = fathom_last_error();
    for (;;) {
        size_t n = strspn(m, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (n == 0 || m[n] != ':' || m[n + 1] != ' ') return m;
        m += n + 2;
    }
}

static int fail(const char *what, int status, int rc) {
    const char *msg = user_message();
    if (!msg[0]) msg = fathom_status_name(status);
    if (what && what[0] && !strstr(msg, what)) {
        fprintf(stderr, "fathom %s: ", command_name);
        cli_print_safe(stderr, what);
        fputs(": ", stderr);
    } else {
        fprintf(stderr, "fathom %s: ", command_name);
    }
    cli_print_safe(stderr, msg);
    fputc('\n', stderr);
    return rc;
}

int cli_out_of_memory(void) {
    cli_error("out of memory");
    return CLI_FAILURE;
}

int cli_fail(const char *what, int status) { return fail(what, status, CLI_FAILURE); }
int cli_fail_usage(const char *what, int status) { return fail(what, status, CLI_USAGE); }

/* ---- options ---- */

static char option_name[64];

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts) {
    char spec[64];
    snprintf(spec, sizeof spec, ":%s", shortopts ? shortopts : "");
    opterr = 0;
    const int before = optind;
    int index = -1;
    const int c = getopt_long(argc, argv, spec, longopts, &index);
    if (c != '?' && c != ':') {
        if (index >= 0) snprintf(option_name, sizeof option_name, "--%s", longopts[index].name);
        else snprintf(option_name, sizeof option_name, "-%c", c);
        return c;
    }
    /* getopt_long has moved optind past the offending argument. */
    const char *arg = optind - 1 >= before && optind - 1 < argc ? argv[optind - 1] : "";
    if (c == ':') {
        cli_usage_error("%s needs a value", arg);
    } else if (optopt && arg[0] == '-' && arg[1] == '-') { /* --flag=value */
        cli_usage_error("%s takes no value", arg);
    } else if (optopt) {
        cli_usage_error("unknown option '-%c'", optopt);
    } else {
        cli_usage_error("unknown option '%s'", arg);
    }
    return '?';
}

int cli_bad_value(const char *expected) {
    if (expected) return cli_usage_error("%s needs %s, not '%s'", option_name, expected, optarg ? optarg : "");
    return cli_usage_error("bad value for %s: '%s'", option_name, optarg ? optarg : "");
}

/* ---- numbers ---- */

bool cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = (uint64_t)v;
    return true;
}

bool cli_parse_u32(const char *s, uint32_t *out) {
    uint64_t v;
    if (!cli_parse_u64(s, &v) || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

bool cli_parse_double(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v)) return false;
    *out = v;
    return true;
}

bool cli_parse_u32_list(const char *s, uint32_t *out, uint32_t cap, uint32_t *count) {
    uint32_t n = 0;
    const char *p = s;
    while (p && *p) {
        char item[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item || n == cap) return false;
        memcpy(item, p, len);
        item[len] = '\0';
        if (!cli_parse_u32(item, &out[n]) || out[n] == 0) return false;
        n++;
        p += len;
        if (*p == ',' && !*++p) return false; /* a trailing comma */
    }
    *count = n;
    return n > 0;
}

bool cli_parse_fractions(const char *list, double *out, uint32_t cap, uint32_t *count) {
    uint32_t n = 0;
    const char *p = list;
    while (p && *p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v > 0.0 && v <= 1.0) || (*end && *end != ',') || n == cap) return false;
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    *count = n;
    return n > 0;
}

bool cli_parse_ids(const char *list, int32_t **ids, size_t *n) {
    size_t cap = 16, count = 0;
    int32_t *out = malloc(cap * sizeof *out);
    const char *p = list;
    while (out && *p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(out);
            return false;
        }
        if (count == cap) {
            int32_t *bigger = realloc(out, 2 * cap * sizeof *out);
            if (!bigger) break;
            out = bigger;
            cap *= 2;
        }
        out[count++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!out || count == 0 || *p) {
        free(out);
        return false;
    }
    *ids = out;
    *n = count;
    return true;
}

/* ---- misc ---- */

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int32_t cli_argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

void cli_print_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

void cli_print_safe(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            fprintf(f, "\\x%02x", *p);
        } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) { /* U+0080..U+009F */
            fprintf(f, "\\xc2\\x%02x", p[1]);
            p++;
        } else {
            fputc(*p, f);
        }
    }
}

static bool terminal_control(unsigned char b) {
    return (b < 0x20 && b != '\n' && b != '\t' && b != '\r') || b == 0x7f;
}

void cli_text_write(cli_text_out *t, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++) {
        const unsigned char b = (unsigned char)s[i];
        if (t->held_c2) {
            t->held_c2 = false;
            if (b >= 0x80 && b <= 0x9f) {
                fprintf(t->f, "\\xc2\\x%02x", b);
                continue;
            }
            fputc(0xc2, t->f);
        }
        if (b == 0xc2) t->held_c2 = true;
        else if (terminal_control(b)) fprintf(t->f, "\\x%02x", b);
        else fputc(b, t->f);
    }
}

void cli_text_finish(cli_text_out *t) {
    if (t->held_c2) fputc(0xc2, t->f);
    t->held_c2 = false;
}

int cli_read_file(const char *path, char **text, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        return -1;
    }
    *text = buf;
    *len = n;
    return 0;
}

bool cli_check_writable(const char *path) {
    struct stat sb;
    const bool existed = stat(path, &sb) == 0;
    if (existed && S_ISDIR(sb.st_mode)) {
        cli_error("cannot write %s: it is a directory", path);
        return false;
    }
    FILE *f = fopen(path, "ab");
    if (!f) {
        cli_error("cannot write %s: %s", path, strerror(errno));
        return false;
    }
    fclose(f);
    if (!existed) remove(path);
    return true;
}

/* ---- progress ---- */

bool cli_progress_wanted(cli_progress_mode mode, bool json) {
    if (mode != CLI_PROGRESS_AUTO) return mode == CLI_PROGRESS_ON;
    return !json && isatty(STDERR_FILENO);
}

void cli_progress_start(cli_progress *p, const char *label) {
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->t0 = cli_now();
    p->tty = isatty(STDERR_FILENO) != 0;
}

void cli_progress_update(void *user, uint64_t done, uint64_t total) {
    cli_progress *p = user;
    const double t = cli_now();
    if (p->tty) {
        if (t - p->last < 0.25 && done != total) return;
        p->last = t;
        const double eta = done ? (t - p->t0) * (double)(total - done) / (double)done : 0;
        fprintf(stderr, "\r%s %5.1f%%  %6.0fs elapsed  ~%4.0fs left ", p->label,
                total ? 100.0 * (double)done / (double)total : 100.0, t - p->t0, eta);
        if (done == total) fputc('\n', stderr);
    } else {
        const int decile = total ? (int)(10 * done / total) : 10;
        if (decile <= p->last_decile) return;
        p->last_decile = decile;
        fprintf(stderr, "%s %d%% (%.0fs)\n", p->label, decile * 10, t - p->t0);
    }
}

int cli_synth_open(fathom_source **out, const char *preset, uint64_t context, uint32_t positions, uint64_t seed) {
    fathom_synth_preset *p;
    int st = fathom_synth_preset_load(&p, preset);
    if (st < 0) return st;
    st = fathom_synth_open_preset(out, p, context, positions, seed);
    fathom_synth_preset_free(p);
    return st;
}
