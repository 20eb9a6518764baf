/* fathom needle — RULER-style retrieval over a haystack of real text, the
 * question at the end in the chat template, three of RULER's tasks:
 *   single    one key-value needle ("The special magic number for <word> is
 *             <7 digits>.") at a random depth; score 1 when the answer holds
 *             the number (RULER niah_single_2);
 *   multikey  four such needles with different words at random depths, one
 *             asked for; score 1 when the answer holds its number
 *             (niah_multikey_1);
 *   vt        variable tracking: "VAR <A> = <5 digits>." then "VAR <B> = VAR
 *             <A>." ... (one chain, 4 hops) in order at random depths; the
 *             score is the share of the 5 names the answer holds
 *             (variable_tracking, string_match_all).
 * One dense prefill per sample; every method continues from it. */
#include "cli.h"
#include "fathom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_METHODS "oracle,fathom:48,sparq:16,sparq:32,thumb,landmark,full4"

static void usage(FILE *f) {
    fprintf(f,
            "usage: fathom needle --haystack DIR|FILE... [options]\n"
            "\n"
            "RULER-style retrieval: per sample, needles are put on their own lines at random\n"
            "depths of a haystack cut from the given texts, the question comes at the end in\n"
            "the chat template with RULER's answer prefix, and the greedy answer is scored.\n"
            "Dense, then every method at each budget (k = max(37, ceil(budget * n))), all\n"
            "from the same dense prefill. Tasks (--task):\n"
            "  single    one needle \"The special magic number for <word> is <7 digits>.\";\n"
            "            1 if the answer holds the number (RULER niah_single_2)\n"
            "  multikey  four such needles with different words, one asked for; 1 if the\n"
            "            answer holds its number (niah_multikey_1)\n"
            "  vt        variable tracking: \"VAR <A> = <5 digits>.\", \"VAR <B> = VAR <A>.\", ...\n"
            "            (one chain of 4 hops, in order); the share of the 5 names the\n"
            "            answer holds (variable_tracking)\n"
            "\n"
            "  --task T          single, multikey or vt (default single)\n"
            "  --model FILE      " CLI_MODEL_HELP "\n"
            "  --haystack P...   text files, or directories of them (sorted by name)\n"
            "  --context N       prompt tokens per sample (default 1024)\n"
            "  --samples S       samples (default 10)\n"
            "  --seed S          seed of words, numbers, depths (default 1)\n"
            "  --tokens N        answer tokens (default 12; 32 for vt)\n"
            "  --methods LIST    default " DEFAULT_METHODS " (dense is always run)\n"
            "  --budgets LIST    default 0.02,0.005\n"
            "  --calib FILE      a capture of this model, for ds, loki, fathom-klt\n"
            "  --threads N       threads (default: one per core)\n"
            "  --json            one JSON object on stdout instead of the table\n"
            "  --progress        progress on stderr (default: only on a terminal, not with --json)\n"
            "  --quiet           no progress\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* RULER draws keys from a word list; these are common English nouns. */
static const char *const keys_words[] = {
    "apple",   "harbor",  "violin",  "meadow",  "lantern", "falcon",  "pepper",  "glacier",
    "copper",  "saddle",  "orchid",  "thunder", "marble",  "compass", "velvet",  "walnut",
    "beacon",  "cactus",  "dolphin", "ember",   "fountain", "garnet", "hammock", "iceberg",
    "jasmine", "kettle",  "lobster", "mirror",  "nectar",  "oyster",  "pebble",  "quartz",
    "raven",   "saffron", "tunnel",  "umbrella", "willow", "yogurt",  "zephyr",  "anchor",
    "blossom", "canyon",  "dragon",  "engine",  "feather", "gravel",  "helmet",  "island"};

typedef enum needle_task { TASK_SINGLE, TASK_MULTIKEY, TASK_VT } needle_task;
static const char *const task_names[] = {"single", "multikey", "vt"};

/* after the chat template's user_open, per task */
static const char *const head_bodies[] = {
    "Some special magic numbers are hidden within the following text. Make sure "
    "to memorize it. I will quiz you about the numbers afterwards.\n",
    "Some special magic numbers are hidden within the following text. Make sure "
    "to memorize it. I will quiz you about the numbers afterwards.\n",
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n"};

#define MAX_NEEDLES 5   /* multikey: 4 needles; vt: a chain of 5 statements */
#define MULTIKEY_NEEDLES 4
#define VT_NAMES 5      /* one chain, 4 hops */
#define VT_NAME_LEN 5

typedef struct text_buf {
    char *p;
    size_t len, cap;
} text_buf;

static bool put(text_buf *b, const char *s, size_t len) {
    if (b->len + len + 1 > b->cap) {
        size_t cap = (b->len + len + 1) * 2;
        char *bigger = realloc(b->p, cap);
        if (!bigger) return false;
        b->p = bigger;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, len);
    b->len += len;
    b->p[b->len] = '\0';
    return true;
}

/* The haystack: texts from files[first], first+1, ... (cyclically), cut to
 * at most `budget` tokens at a token boundary, then back to the last line
 * break so the needle goes between whole lines. */
static int make_haystack(const fathom_tokenizer *tok, char **files, size_t n_files, size_t first,
                         uint64_t budget, char **out) {
    text_buf raw = {0};
    /* Short texts repeat (bounded): RULER's simplest haystack is one sentence repeated. */
    for (size_t f = 0; f < 64 * n_files && raw.len < 8 * budget; f++) {
        char *text = NULL;
        size_t len = 0;
        if (cli_read_file(files[(first + f) % n_files], &text, &len) < 0) {
            cli_error("cannot read %s", files[(first + f) % n_files]);
            free(raw.p);
            return FATHOM_ERR_IO;
        }
        bool ok = put(&raw, text, len) && put(&raw, "\n", 1);
        free(text);
        if (!ok) {
            free(raw.p);
            return FATHOM_ERR_NOMEM;
        }
    }
    int32_t *ids = NULL;
    size_t n = 0;
    /* No special tokens in the haystack: encode as plain text. */
    int st = raw.p ? cli_encode(tok, raw.p, raw.len, false, &ids, &n) : FATHOM_OK;
    free(raw.p);
    if (st < 0) return st;
    if (n > budget) n = (size_t)budget;
    char *text = n ? cli_decode_text(tok, ids, (uint32_t)n) : strdup("");
    free(ids);
    if (!text) return FATHOM_ERR_NOMEM;
    char *nl = strrchr(text, '\n');
    if (nl) nl[1] = '\0';
    *out = text;
    return FATHOM_OK;
}

typedef struct needle_options {
    needle_task task;
    const char *model, *methods, *budgets, *calib;
    char **haystack;
    int n_haystack;
    uint32_t context, samples, tokens, threads;
    uint64_t seed;
    bool json;
    cli_progress_mode progress;
} needle_options;

typedef struct row {
    fathom_method method;
    double budget;
    double *hits; /* [samples] */
    double k;     /* sum */
} row;

/* Everything one run holds. */
typedef struct needle_run {
    const needle_options *o;
    bool progress;
    cli_session ses;
    fathom_ctx *ctx;
    row *rows; /* dense, then every method at every budget */
    uint32_t n_rows;
    float *logits;
    int32_t *gen, stop_a, stop_b;
    uint64_t tokens_sum; /* prompt tokens over the samples */
    fathom_chat_template tmpl; /* the model's (ChatML, Gemma): by its turn tokens */
    char head_text[512];       /* tmpl.user_open + the task's head body */
} needle_run;

static int make_rows(needle_run *r) {
    const cli_session *s = &r->ses;
    fathom_method dense_m;
    fathom_method_parse("dense", &dense_m);
    r->rows = calloc(1 + (size_t)s->n_budgets * s->n_methods, sizeof *r->rows);
    if (!r->rows) return cli_out_of_memory();
    r->rows[r->n_rows++].method = dense_m;
    for (uint32_t b = 0; b < s->n_budgets; b++)
        for (uint32_t m = 0; m < s->n_methods; m++) {
            if (s->methods[m].kind == FATHOM_METHOD_DENSE) continue;
            r->rows[r->n_rows].method = s->methods[m];
            r->rows[r->n_rows++].budget = s->budgets[b];
        }
    for (uint32_t w = 0; w < r->n_rows; w++)
        if (!(r->rows[w].hits = calloc(r->o->samples, sizeof(double)))) return cli_out_of_memory();
    r->logits = malloc((size_t)s->info.vocab * sizeof *r->logits);
    r->gen = malloc((size_t)r->o->tokens * sizeof *r->gen);
    return r->logits && r->gen ? CLI_OK : cli_out_of_memory();
}

/* A sample's needles: lines put at depths (fractions of the haystack, in
 * the order given, each at or after the one before). */
typedef struct needles {
    uint32_t count;
    char line[MAX_NEEDLES][96];
    double depth[MAX_NEEDLES];
} needles;

/* Sample s's prompt: the question's parts around a haystack that fills the
 * rest of --context, each needle on its own line at its depth. */
static int make_prompt(needle_run *r, uint32_t s, const needles *nd, const char *tail, text_buf *prompt,
                       int32_t **ids, size_t *n) {
    const fathom_tokenizer *tok = r->ses.tok;
    int st;
    /* Token cost of everything but the haystack, then the haystack fills the rest. */
    prompt->len = 0;
    bool ok = put(prompt, r->head_text, strlen(r->head_text)) && put(prompt, tail, strlen(tail));
    for (uint32_t i = 0; i < nd->count && ok; i++) ok = put(prompt, nd->line[i], strlen(nd->line[i]));
    if (!ok) return cli_out_of_memory();
    size_t fixed = 0;
    if ((st = cli_encode(tok, prompt->p, prompt->len, true, ids, &fixed)) < 0) return cli_fail("encode", st);
    free(*ids);
    *ids = NULL;
    if (fixed + 16 > r->o->context)
        return cli_usage_error("--context %u is too small for the question", r->o->context);
    char *hay = NULL;
    if ((st = make_haystack(tok, r->ses.files, r->ses.n_files, s % r->ses.n_files, r->o->context - fixed - 8,
                            &hay)) < 0)
        return cli_fail("haystack", st);
    size_t hay_len = strlen(hay);
    if (strspn(hay, " \t\r\n") == hay_len) {
        free(hay);
        cli_error("the haystack files hold no text");
        return CLI_FAILURE;
    }
    /* Each needle goes at the line break nearest below depth * length (not
     * before the previous needle's place). */
    prompt->len = 0;
    ok = put(prompt, r->head_text, strlen(r->head_text));
    size_t done = 0;
    for (uint32_t i = 0; i < nd->count && ok; i++) {
        size_t at = (size_t)(nd->depth[i] * (double)hay_len);
        while (at > done && hay[at - 1] != '\n') at--;
        if (at < done) at = done;
        ok = put(prompt, hay + done, at - done) && put(prompt, nd->line[i], strlen(nd->line[i]));
        done = at;
    }
    ok = ok && put(prompt, hay + done, hay_len - done) && put(prompt, tail, strlen(tail));
    free(hay);
    if (!ok) return cli_out_of_memory();
    if ((st = cli_encode(tok, prompt->p, prompt->len, true, ids, n)) < 0) return cli_fail("encode", st);
    if (s == 0 && *n < r->o->context * 9 / 10)
        cli_warn("the prompt has %zu tokens, fewer than --context %u: the haystack files are too short",
                 *n, r->o->context);
    if (*n + r->o->tokens > fathom_ctx_capacity(r->ctx)) {
        cli_error("sample %u has %zu tokens, more than the context", s, *n);
        return CLI_FAILURE;
    }
    return CLI_OK;
}

static double uniform01(uint64_t *rng) { return (double)(splitmix64(rng) >> 11) * 0x1.0p-53; }

static int compare_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What a sample asks: the needles, the question (tail), and the strings a
 * correct answer holds (one for single/multikey, the 5 names for vt). */
typedef struct sample_spec {
    needles nd;
    char tail[640];
    uint32_t n_expected;
    char expected[VT_NAMES][16];
} sample_spec;

static void make_spec(const needle_run *r, uint32_t s, sample_spec *sp) {
    const needle_options *o = r->o;
    uint64_t rng = o->seed * 0x100000001B3ull + s;
    const uint32_t n_words = sizeof keys_words / sizeof keys_words[0];
    memset(sp, 0, sizeof *sp);
    if (o->task == TASK_VT) {
        /* one chain: VAR A = value, VAR B = VAR A, ... at increasing depths */
        const unsigned value = 10000u + (unsigned)(splitmix64(&rng) % 90000u);
        sp->nd.count = sp->n_expected = VT_NAMES;
        for (uint32_t i = 0; i < VT_NAMES; i++) {
            bool fresh;
            do { /* distinct names */
                for (uint32_t c = 0; c < VT_NAME_LEN; c++) sp->expected[i][c] = (char)('A' + splitmix64(&rng) % 26);
                fresh = true;
                for (uint32_t j = 0; j < i; j++) fresh = fresh && strcmp(sp->expected[i], sp->expected[j]) != 0;
            } while (!fresh);
            sp->nd.depth[i] = uniform01(&rng);
        }
        qsort(sp->nd.depth, VT_NAMES, sizeof(double), compare_double);
        snprintf(sp->nd.line[0], sizeof sp->nd.line[0], "VAR %s = %u.\n", sp->expected[0], value);
        for (uint32_t i = 1; i < VT_NAMES; i++)
            snprintf(sp->nd.line[i], sizeof sp->nd.line[i], "VAR %s = VAR %s.\n", sp->expected[i],
                     sp->expected[i - 1]);
        snprintf(sp->tail, sizeof sp->tail,
                 "\nQuestion: Find all variables that are assigned the value %u in the text above.%s%s"
                 "Answer: According to the chain(s) of variable assignment in the text above, %u variables "
                 "are assigned the value %u, they are:",
                 value, r->tmpl.user_close, r->tmpl.assistant_open, VT_NAMES, value);
        return;
    }
    /* single: one needle; multikey: four with distinct words, the first asked */
    const uint32_t count = o->task == TASK_MULTIKEY ? MULTIKEY_NEEDLES : 1;
    uint32_t word_ix[MULTIKEY_NEEDLES];
    unsigned number[MULTIKEY_NEEDLES];
    for (uint32_t i = 0; i < count; i++) {
        bool fresh;
        do {
            word_ix[i] = (uint32_t)(splitmix64(&rng) % n_words);
            fresh = true;
            for (uint32_t j = 0; j < i; j++) fresh = fresh && word_ix[j] != word_ix[i];
        } while (!fresh);
        number[i] = 1000000u + (unsigned)(splitmix64(&rng) % 9000000u);
        sp->nd.depth[i] = uniform01(&rng);
    }
    /* needles go in depth order; the asked one (index 0) keeps its word */
    uint32_t order[MULTIKEY_NEEDLES];
    for (uint32_t i = 0; i < count; i++) order[i] = i;
    for (uint32_t i = 1; i < count; i++)
        for (uint32_t j = i; j > 0 && sp->nd.depth[order[j]] < sp->nd.depth[order[j - 1]]; j--) {
            const uint32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    double depth[MULTIKEY_NEEDLES];
    for (uint32_t i = 0; i < count; i++) depth[i] = sp->nd.depth[order[i]];
    for (uint32_t i = 0; i < count; i++) {
        sp->nd.depth[i] = depth[i];
        snprintf(sp->nd.line[i], sizeof sp->nd.line[i], "The special magic number for %s is %u.\n",
                 keys_words[word_ix[order[i]]], number[order[i]]);
    }
    sp->nd.count = count;
    sp->n_expected = 1;
    snprintf(sp->expected[0], sizeof sp->expected[0], "%u", number[0]);
    const char *word = keys_words[word_ix[0]];
    snprintf(sp->tail, sizeof sp->tail,
             "\nWhat is the special magic number for %s mentioned in the provided text?"
             "%s%sThe special magic number for %s mentioned in the provided text is",
             word, r->tmpl.user_close, r->tmpl.assistant_open, word);
}

/* The share of the expected strings the answer holds. */
static double score_answer(const sample_spec *sp, const char *answer) {
    uint32_t found = 0;
    for (uint32_t i = 0; i < sp->n_expected; i++) found += strstr(answer, sp->expected[i]) != NULL;
    return (double)found / sp->n_expected;
}

/* One sample: its prompt, one dense prefill, every row's answer. */
static int run_sample(needle_run *r, uint32_t s, text_buf *prompt) {
    const needle_options *o = r->o;
    sample_spec sp;
    make_spec(r, s, &sp);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = make_prompt(r, s, &sp.nd, sp.tail, prompt, &ids, &n);
    if (rc != CLI_OK) {
        free(ids);
        return rc;
    }
    r->tokens_sum += n;
    if (r->progress) {
        fprintf(stderr, "[%u/%u] %zu tokens, expecting", s + 1, o->samples, n);
        for (uint32_t i = 0; i < sp.n_expected; i++) fprintf(stderr, " %s", sp.expected[i]);
        fprintf(stderr, "; needles at depths");
        for (uint32_t i = 0; i < sp.nd.count; i++) fprintf(stderr, " %.2f", sp.nd.depth[i]);
        fprintf(stderr, "\n");
    }
    int st;
    if ((st = fathom_ctx_reset(r->ctx)) < 0 || (st = fathom_ctx_set_attention(r->ctx, NULL, 1, NULL)) < 0 ||
        (st = cli_prefill(r->ctx, ids, n - 1, NULL, r->progress)) < 0) {
        free(ids);
        return cli_fail("prefill", st);
    }
    if (o->json) {
        printf("%s{\"expected\": [", s ? ", " : "");
        for (uint32_t i = 0; i < sp.n_expected; i++) printf("%s\"%s\"", i ? ", " : "", sp.expected[i]);
        printf("], \"needles\": [");
        for (uint32_t i = 0; i < sp.nd.count; i++) {
            char line[96];
            snprintf(line, sizeof line, "%.*s", (int)strcspn(sp.nd.line[i], "\n"), sp.nd.line[i]);
            printf("%s{\"text\": ", i ? ", " : "");
            cli_print_json_string(stdout, line);
            printf(", \"depth\": %.4f}", sp.nd.depth[i]);
        }
        printf("], \"n_tokens\": %zu, \"answers\": {", n);
    }
    for (uint32_t i = 0; i < r->n_rows && rc == CLI_OK; i++) {
        row *w = &r->rows[i];
        const bool dense = w->method.kind == FATHOM_METHOD_DENSE;
        const uint32_t k = dense ? 1 : cli_budget_k(w->budget, n);
        const fathom_source *cal = cli_method_uses_calib(&w->method) ? r->ses.calib : NULL;
        uint32_t produced = 0;
        if ((st = cli_continue(r->ctx, n - 1, ids[n - 1], &w->method, k, cal, o->tokens, r->stop_a, r->stop_b,
                               r->logits, r->ses.info.vocab, r->gen, &produced, NULL)) < 0) {
            rc = cli_fail(w->method.name, st);
            break;
        }
        char *answer = cli_decode_text(r->ses.tok, r->gen, produced);
        if (!answer) {
            rc = cli_out_of_memory();
            break;
        }
        w->hits[s] = score_answer(&sp, answer);
        w->k += dense ? 0 : k;
        if (r->progress) {
            fprintf(stderr, "  %-12s %-6g k %-5u %.2f |", w->method.name, w->budget, k, w->hits[s]);
            cli_print_safe(stderr, answer);
            fprintf(stderr, "|\n");
        }
        if (o->json) {
            char key[64];
            snprintf(key, sizeof key, "%s@%g", w->method.name, w->budget);
            printf("%s", i ? ", " : "");
            cli_print_json_string(stdout, key);
            printf(": ");
            cli_print_json_string(stdout, answer);
        }
        free(answer);
    }
    if (o->json && rc == CLI_OK) printf("}}");
    free(ids);
    return rc;
}

static void print_results(const needle_run *r) {
    const needle_options *o = r->o;
    if (o->json) printf("], \"results\": [");
    else
        printf("needle retrieval (%s): %u samples of %.0f tokens on average (score: mean +- standard error)\n"
               "%-8s %-12s %7s %15s\n",
               task_names[o->task], o->samples, (double)r->tokens_sum / o->samples, "budget", "method", "k",
               "score");
    for (uint32_t i = 0; i < r->n_rows; i++) {
        const row *w = &r->rows[i];
        double sum = 0.0, ss = 0.0;
        for (uint32_t s = 0; s < o->samples; s++) sum += w->hits[s];
        const double mean = sum / o->samples;
        for (uint32_t s = 0; s < o->samples; s++) ss += (w->hits[s] - mean) * (w->hits[s] - mean);
        const double se = o->samples > 1 ? sqrt(ss / (o->samples - 1) / o->samples) : 0.0;
        if (o->json) {
            printf("%s\n  {\"method\": ", i ? "," : "");
            cli_print_json_string(stdout, w->method.name);
            printf(", \"budget\": %g, \"k_mean\": %.1f, \"score\": %.4f, \"stderr\": %.4f}", w->budget,
                   w->k / o->samples, mean, se);
        } else {
            printf("%-8g %-12s %7.1f   %5.3f +- %5.3f\n", w->budget, w->method.name, w->k / o->samples, mean, se);
        }
    }
    if (o->json) printf("\n]}\n");
    else if (o->task == TASK_VT)
        printf("score: share of the chain's %d variable names the answer holds, averaged over samples; "
               "higher is better.\n", VT_NAMES);
    else printf("score: share of samples whose answer contains the asked needle's number; higher is better.\n");
}

static int run(const needle_options *o) {
    needle_run r = {.o = o, .progress = cli_progress_wanted(o->progress, o->json)};
    text_buf prompt = {0};
    int rc = cli_session_open(&r.ses, o->methods, o->budgets, o->model, o->calib, o->haystack, o->n_haystack);
    if (rc != CLI_OK) return rc;
    cli_check_window(&r.ses.info, (uint64_t)o->context + o->tokens);
    int st = fathom_ctx_create(&r.ctx, r.ses.model, o->context + o->tokens + 64, o->threads);
    if (st < 0) rc = cli_fail("context", st);
    else if ((st = fathom_chat_template_for(r.ses.tok, &r.tmpl)) < 0) rc = cli_fail("chat template", st);
    else rc = make_rows(&r);
    snprintf(r.head_text, sizeof r.head_text, "%s%s", r.tmpl.user_open, head_bodies[o->task]);
    if (rc == CLI_OK) {
        cli_stop_tokens(r.ses.tok, &r.stop_a, &r.stop_b);
        if (o->json) {
            printf("{\"model\": ");
            cli_print_json_string(stdout, r.ses.info.name);
            printf(", \"task\": \"%s\", \"context\": %u, \"samples\": [", task_names[o->task], o->context);
        }
        for (uint32_t s = 0; s < o->samples && rc == CLI_OK; s++) rc = run_sample(&r, s, &prompt);
        if (rc == CLI_OK) print_results(&r);
    }
    free(prompt.p);
    if (r.rows)
        for (uint32_t i = 0; i < r.n_rows; i++) free(r.rows[i].hits);
    free(r.rows);
    free(r.logits);
    free(r.gen);
    fathom_ctx_free(r.ctx);
    cli_session_close(&r.ses);
    return rc;
}

enum { OPT_MODEL = 256, OPT_TASK, OPT_HAYSTACK, OPT_CONTEXT, OPT_SAMPLES, OPT_SEED, OPT_TOKENS, OPT_METHODS,
       OPT_BUDGETS, OPT_CALIB, OPT_THREADS, OPT_JSON, OPT_QUIET, OPT_PROGRESS };
static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"model", required_argument, NULL, OPT_MODEL},
    {"task", required_argument, NULL, OPT_TASK},
    {"haystack", required_argument, NULL, OPT_HAYSTACK},
    {"context", required_argument, NULL, OPT_CONTEXT},
    {"samples", required_argument, NULL, OPT_SAMPLES},
    {"seed", required_argument, NULL, OPT_SEED},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"methods", required_argument, NULL, OPT_METHODS},
    {"budgets", required_argument, NULL, OPT_BUDGETS},
    {"calib", required_argument, NULL, OPT_CALIB},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"json", no_argument, NULL, OPT_JSON},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {NULL, 0, NULL, 0},
};

int cmd_needle(int argc, char **argv) {
    needle_options o = {0};
    o.methods = DEFAULT_METHODS;
    o.budgets = "0.02,0.005";
    o.context = 1024;
    o.samples = 10;
    bool tokens_given = false; /* else 12, or 32 for vt */
    o.seed = 1;
    const char *first_hay = NULL;
    int c;
    while ((c = cli_getopt(argc, argv, "h", long_options)) != -1) {
        uint32_t *num = NULL;
        switch (c) {
        case 'h': usage(stdout); return CLI_OK;
        case '?': return CLI_USAGE;
        case OPT_MODEL: o.model = optarg; break;
        case OPT_TASK: {
            int t = 0;
            while (t < 3 && strcmp(optarg, task_names[t]) != 0) t++;
            if (t == 3) return cli_usage_error("--task: '%s' is not single, multikey or vt", optarg);
            o.task = (needle_task)t;
            break;
        }
        case OPT_HAYSTACK: first_hay = optarg; break;
        case OPT_METHODS: o.methods = optarg; break;
        case OPT_BUDGETS: o.budgets = optarg; break;
        case OPT_CALIB: o.calib = optarg; break;
        case OPT_CONTEXT: num = &o.context; break;
        case OPT_SAMPLES: num = &o.samples; break;
        case OPT_TOKENS:
            num = &o.tokens;
            tokens_given = true;
            break;
        case OPT_THREADS: num = &o.threads; break;
        case OPT_SEED:
            if (!cli_parse_u64(optarg, &o.seed)) return cli_bad_value("a non-negative integer");
            break;
        case OPT_JSON: o.json = true; break;
        case OPT_QUIET: o.progress = CLI_PROGRESS_OFF; break;
        case OPT_PROGRESS: o.progress = CLI_PROGRESS_ON; break;
        }
        if (num && !cli_parse_u32(optarg, num)) return cli_bad_value("a non-negative integer");
    }
    if (!first_hay) return cli_usage_error("--haystack is required");
    if (!tokens_given) o.tokens = o.task == TASK_VT ? 32 : 12;
    if (o.samples == 0 || o.tokens == 0 || o.context < 64 || o.context > (1u << 24))
        return cli_usage_error("--samples and --tokens must be >= 1, --context in [64, 2^24]");
    /* --haystack a b c: getopt_long leaves b and c after the options */
    char **hay = malloc((size_t)(argc - optind + 1) * sizeof *hay);
    if (!hay) return cli_out_of_memory();
    hay[0] = (char *)first_hay;
    for (int i = optind; i < argc; i++) hay[1 + i - optind] = argv[i];
    o.haystack = hay;
    o.n_haystack = 1 + argc - optind;
    int rc = run(&o);
    free(hay);
    return rc;
}
