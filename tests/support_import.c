/*
 * support_import.c -- what the tests of pl_run_export and pl_run_import
 * (test_import*.c) share: the policies and their registry, exports as text
 * and as lines, and the checks of a run.
 */
#include "support_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Calls echo, then asks a human. */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *answer = NULL;
    int st = pl_ctx_invokef(NULL, ctx, "echo", "{s:i}", "n", 1);
    if (!st)
        st = pl_ctx_invokef(&answer, ctx, "human", "{s:s}", "q", "ok?");
    if (!st)
        st = pl_steps_add_result(out, answer);
    cJSON_Delete(answer);
    return st;
}

static int outer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *total = NULL, *echoed = NULL;
    int st = pl_ctx_invokef(&total, ctx, "chain", "{s:i}", "n", 3);
    if (!st)
        st = pl_ctx_invokef(&echoed, ctx, "echo", "{s:s}", "say", "hi");
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O, s:O}", "chain", total, "echo",
                                  echoed);
    cJSON_Delete(total);
    cJSON_Delete(echoed);
    return st;
}

/* Calls echo, then fails. */
static int breaks(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)out;
    (void)user;
    int st = pl_ctx_invokef(NULL, ctx, "echo", "{s:i}", "n", 2);
    return st ? st : pl_errorf(PL_EPOLICY, "the card was declined");
}

/* Waits for "go", then for "more" up to payload.ms (absent: not at all);
 * returns what came. */
static int waits(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    cJSON *go = NULL, *more = NULL;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(a->payload, "ms");
    int st = pl_ctx_wait_event(&go, ctx, "go", PL_WAIT_FOREVER);
    if (!st && cJSON_IsNumber(ms))
        st = pl_ctx_wait_event(&more, ctx, "more", (int64_t)ms->valuedouble);
    if (st == PL_ETIMEDOUT)
        st = PL_OK;
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O, s:O}", "go", go, "more",
                                  more ? more : cJSON_CreateNull());
    cJSON_Delete(go);
    cJSON_Delete(more);
    return st;
}

pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "waits", waits, NULL), PL_OK);
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = "outer";
    d.fn = outer;
    d.code_version = "outer/1";
    cr_assert_eq(pl_registry_add(reg, &d), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "ask", ask, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_fn(reg, "breaks", breaks, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_human(reg, "human"), PL_OK);
    return reg;
}

/* ---- helpers ------------------------------------------------------------------ */

char *text_dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    cr_assert(d);
    memcpy(d, s, n);
    return d;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    char *text = NULL;
    size_t len = 0, cap = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (len + 2 > cap) {
            cap = cap ? 2 * cap : 4096;
            text = realloc(text, cap);
            cr_assert(text);
        }
        text[len++] = (char)c;
    }
    fclose(f);
    if (!text)
        text = calloc(1, 1);
    text[len] = '\0';
    return text;
}

/* The export of run @p id, as text (caller frees). */
char *export_text(pl_engine *e, const char *id)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/export.jsonl", t_tmpdir());
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(pl_run_export(e, id, f), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(fclose(f), 0);
    return slurp(path);
}

/* Import @p text; returns the status, the new id in *out (or NULL). */
int import_text(pl_engine *e, const char *text, const char *new_id, char **out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/import.jsonl", t_tmpdir());
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    f = fopen(path, "rb");
    cr_assert(f);
    int st = pl_run_import(out, e, f, new_id);
    fclose(f);
    return st;
}

static int count_visit(const pl_run_info *ri, void *user)
{
    (void)ri;
    (*(size_t *)user)++;
    return 0;
}

size_t run_count(pl_engine *e)
{
    size_t n = 0;
    cr_assert_eq(pl_engine_runs(e, count_visit, &n), PL_OK);
    return n;
}

lines split(const char *text)
{
    lines l = {0};
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        l.v = realloc(l.v, (l.n + 1) * sizeof *l.v);
        cr_assert(l.v);
        l.v[l.n] = malloc(n + 1);
        cr_assert(l.v[l.n]);
        memcpy(l.v[l.n], p, n);
        l.v[l.n][n] = '\0';
        l.n++;
        p += n + (nl ? 1 : 0);
    }
    return l;
}

char *join(const lines *l)
{
    size_t n = 1;
    for (size_t i = 0; i < l->n; i++)
        n += strlen(l->v[i]) + 1;
    char *t = malloc(n), *w = t;
    cr_assert(t);
    for (size_t i = 0; i < l->n; i++) {
        size_t k = strlen(l->v[i]);
        memcpy(w, l->v[i], k);
        w += k;
        *w++ = '\n';
    }
    *w = '\0';
    return t;
}

void free_lines(lines *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

/* The index of the line of step @p id. */
size_t line_of(const lines *l, const char *id)
{
    char needle[128];
    snprintf(needle, sizeof needle, "\"id\":\"%s\"", id);
    for (size_t i = 0; i < l->n; i++)
        if (strstr(l->v[i], needle))
            return i;
    cr_assert_fail("no line for step %s", id);
    return 0;
}

/* Replace the first @p from in line @p i with @p to. */
void edit(lines *l, size_t i, const char *from, const char *to)
{
    char *at = strstr(l->v[i], from);
    cr_assert(at, "'%s' is not in line %zu", from, i);
    size_t n = strlen(l->v[i]) - strlen(from) + strlen(to) + 1;
    char *s = malloc(n);
    cr_assert(s);
    snprintf(s, n, "%.*s%s%s", (int)(at - l->v[i]), l->v[i], to,
             at + strlen(from));
    free(l->v[i]);
    l->v[i] = s;
}

/* Flip one hex digit of field @p name's value, @p back digits before its
 * end. */
void flip_hex(lines *l, size_t i, const char *name, size_t back)
{
    char key[64];
    snprintf(key, sizeof key, "\"%s\":\"", name);
    char *v = strstr(l->v[i], key);
    cr_assert(v, "no %s in line %zu", name, i);
    v += strlen(key);
    char *end = strchr(v, '"');
    cr_assert(end && (size_t)(end - v) > back);
    char *c = end - 1 - back;
    *c = *c == '0' ? '1' : '0';
}

/* A completed run "old" of outer in @p e. */
void completed_run(pl_engine *e)
{
    pl_outcome *o = t_start(e, "outer", "{}", "old");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
}

/* Replay run @p id with check: served from the ledger, nothing executed. */
void checks_clean(pl_engine *e, const char *id)
{
    pl_run_options opts = PL_RUN_OPTIONS_INIT;
    opts.check = true;
    pl_outcome *o = NULL;
    int before = t_calls.chain + t_calls.echo;
    cr_assert_eq(pl_run_continue(&o, e, id, &opts), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->calls_executed, 0);
    cr_assert_eq(o->steps_appended, 0);
    cr_assert_eq(t_calls.chain + t_calls.echo, before);
    pl_outcome_free(o);
}

void tamper_setup(tamper_fixture *f)
{
    f->reg = registry();
    f->a = t_engine(t_store_path(), f->reg, PL_DURABILITY_PROCESS);
    f->b = t_engine(t_store_path(), f->reg, PL_DURABILITY_PROCESS);
    completed_run(f->a);
    f->text = export_text(f->a, "old");
    f->l = split(f->text);
}

void tamper_teardown(tamper_fixture *f)
{
    free_lines(&f->l);
    free(f->text);
    pl_engine_close(f->a);
    pl_engine_close(f->b);
    pl_registry_free(f->reg);
    t_cleanup();
}

/* Importing @p text fails with @p want, its message holding @p says, and
 * nothing is written. */
void refused(tamper_fixture *f, const char *text, int want, const char *says)
{
    char *id = NULL;
    cr_assert_eq(run_count(f->b), 0);
    int st = import_text(f->b, text, NULL, &id);
    cr_assert_eq(st, want, "status %s, wanted %s: %s", pl_status_name(st),
                 pl_status_name(want), pl_errmsg());
    cr_assert_null(id);
    cr_assert(strstr(pl_errmsg(), says), "'%s' does not say '%s'", pl_errmsg(),
              says);
    cr_assert_eq(run_count(f->b), 0);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, f->b, "old"), PL_ENOTFOUND);
}

void refused_lines(tamper_fixture *f, int want, const char *says)
{
    char *t = join(&f->l);
    refused(f, t, want, says);
    free(t);
}
