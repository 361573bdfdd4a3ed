/*
 * support_workflow_fx.c -- what test_workflow.c reads back (see
 * support_workflow_fx.h).
 */
#include "support_workflow_fx.h"

#include "support_workflow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- what the tools wrote -------------------------------------------------- */

static void *grow(void *v, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return v;
    *cap = *cap ? *cap * 2 : 256;
    void *nv = realloc(v, *cap * size);
    cr_assert(nv);
    return nv;
}

static void add_edge(effects *fx, long long t, int delta, const char *run)
{
    fx->ev = grow(fx->ev, &fx->capev, fx->nev + 1, sizeof *fx->ev);
    edge *g = &fx->ev[fx->nev++];
    g->t = t;
    g->delta = delta;
    size_t n = strnlen(run, sizeof g->run - 1); /* an id's length, at most */
    memcpy(g->run, run, n);
    g->run[n] = '\0';
}

/* Open intervals, by run and process, to close at a process's death. */
typedef struct open_call {
    char run[PL_MAX_RUN_ID + 1];
    long pid;
    int depth;
} open_call;

bool fx_lapsed(const lapse *lp, int nl, long pid, const char *run)
{
    for (int k = 0; k < nl; k++)
        if (lp[k].pid == pid && !strcmp(lp[k].run, run))
            return true;
    return false;
}

void fx_read(effects *fx, const char *path, const death *d, int nd,
             const lapse *lp, int nl)
{
    FILE *f = fopen(path, "r");
    cr_assert(f, "no effects file: no tool ran");
    open_call open[256];
    int n_open = 0;
    char line[800];
    while (fgets(line, sizeof line, f)) {
        char a[PL_MAX_RUN_ID + 64], b[16];
        long pid;
        long long t;
        if (line[0] == 'E') {
            cr_assert_eq(sscanf(line, "E %191s %15s %ld", a, b, &pid), 3,
                         "effects: %s", line);
            fx->x = grow(fx->x, &fx->capx, fx->nx + 1, sizeof *fx->x);
            exec_rec *r = &fx->x[fx->nx++];
            snprintf(r->key, sizeof r->key, "%s", a);
            snprintf(r->tool, sizeof r->tool, "%s", b);
            r->pid = pid;
            continue;
        }
        cr_assert(line[0] == 'B' || line[0] == 'L', "effects: %s", line);
        char rn[PL_MAX_RUN_ID + 1];
        cr_assert_eq(sscanf(line + 2, "%128s %ld %lld", rn, &pid, &t), 3,
                     "effects: %s", line);
        int delta = line[0] == 'B' ? 1 : -1;
        if (fx_lapsed(lp, nl, pid, rn))
            continue; /* it went on in another worker, where it counts */
        add_edge(fx, t, delta, rn);
        int i = 0;
        while (i < n_open && (open[i].pid != pid || strcmp(open[i].run, rn)))
            i++;
        if (i == n_open) {
            cr_assert_lt(n_open, 256);
            snprintf(open[i].run, sizeof open[i].run, "%s", rn);
            open[i].pid = pid;
            open[i].depth = 0;
            n_open++;
        }
        open[i].depth += delta;
    }
    fclose(f);
    /* a call a process was inside when it died ends at its death */
    for (int i = 0; i < n_open; i++) {
        if (!open[i].depth)
            continue;
        int k = 0;
        while (k < nd && d[k].pid != open[i].pid)
            k++;
        cr_assert(k < nd,
                  "process %ld never left a call of %s, and was "
                  "never killed",
                  open[i].pid, open[i].run);
        for (int j = 0; j < open[i].depth; j++)
            add_edge(fx, d[k].t, -1, open[i].run);
    }
}

static int cmp_edge(const void *pa, const void *pb)
{
    const edge *a = pa, *b = pb;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    return a->delta - b->delta; /* leaves first */
}

/* The most runs of the key inside a call at one instant. */
int fx_most_inside(effects *fx)
{
    qsort(fx->ev, fx->nev, sizeof *fx->ev, cmp_edge);
    char runs[64][PL_MAX_RUN_ID + 1];
    int depth[64], n_runs = 0, inside = 0, most = 0;
    for (size_t i = 0; i < fx->nev; i++) {
        if (strncmp(fx->ev[i].run, "order-", 6))
            continue;
        int r = 0;
        while (r < n_runs && strcmp(runs[r], fx->ev[i].run))
            r++;
        if (r == n_runs) {
            cr_assert_lt(n_runs, 64);
            snprintf(runs[r], sizeof runs[r], "%s", fx->ev[i].run);
            depth[r] = 0;
            n_runs++;
        }
        int before = depth[r];
        depth[r] += fx->ev[i].delta;
        inside += (depth[r] > 0) - (before > 0);
        if (inside > most)
            most = inside;
    }
    return most;
}

bool fx_died_mid(const death *d, int nd, long pid)
{
    for (int k = 0; k < nd; k++)
        if (d[k].pid == pid && d[k].mid)
            return true;
    return false;
}

/* The realtime of the last "B" line of a run's process before the
 * effect line of @p key by @p pid: the start of that execution. */
long long fx_started_ns(const char *path, const char *key, long pid)
{
    char run[PL_MAX_RUN_ID + 1];
    snprintf(run, sizeof run, "%.*s", (int)strcspn(key, "/"), key);
    FILE *f = fopen(path, "r");
    cr_assert(f);
    char line[800], want[PL_MAX_RUN_ID + 100];
    snprintf(want, sizeof want, "E %s ", key);
    long long t = 0, last = 0;
    while (fgets(line, sizeof line, f)) {
        char a[PL_MAX_RUN_ID + 64];
        long p;
        long long tt;
        if (line[0] == 'B' &&
            sscanf(line, "B %191s %ld %lld", a, &p, &tt) == 3 && p == pid &&
            !strcmp(a, run))
            last = tt;
        if (!strncmp(line, want, strlen(want)) &&
            strtol(line + strlen(want) + strcspn(line + strlen(want), " "),
                   NULL, 10) == pid)
            t = last;
    }
    fclose(f);
    return t;
}

/* ---- walking the ledgers --------------------------------------------------- */

int wf_visit_step(const pl_step *s, void *user)
{
    walk *w = user;
    w->steps++;
    const cJSON *p = pl_step_payload(s);
    bool root = !strncmp(pl_step_id(s), "0:", 2);
    if (pl_step_type_of(s) == PL_STEP_ACTION_CALL) {
        const cJSON *pol = cJSON_GetObjectItemCaseSensitive(p, "policy");
        cr_assert(cJSON_IsString(pol), "%s: a call without its policy", w->run);
        w->tool_calls += strcmp(pol->valuestring, "order") &&
                         strcmp(pol->valuestring, "invoice") &&
                         strcmp(pol->valuestring, "note") &&
                         strncmp(pol->valuestring, WORKFLOW_MCP_NAME ".",
                                 strlen(WORKFLOW_MCP_NAME) + 1);
        w->notes += !strcmp(pol->valuestring, "note");
        w->crm += !strcmp(pol->valuestring, WORKFLOW_MCP_NAME ".echo");
        if (root && !strcmp(pol->valuestring, "reserve"))
            w->reserved = true;
        if (root && !strcmp(pol->valuestring, "invoice"))
            w->invoiced_first = !w->reserved;
    }
    const cJSON *change = cJSON_GetObjectItemCaseSensitive(p, "change");
    if (root && pl_step_type_of(s) == PL_STEP_SIDE_EFFECT &&
        cJSON_IsString(change)) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "version");
        cr_assert(cJSON_IsNumber(v) && v->valueint >= 1 && v->valueint <= 2,
                  "%s: version marker %s", w->run, pl_step_id(s));
        w->version = v->valueint;
    }
    if (pl_step_type_of(s) != PL_STEP_SIDE_EFFECT)
        return 0;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "value");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "rate_limit"))
        return 0;
    const cJSON *adm = cJSON_GetObjectItemCaseSensitive(v, "admitted");
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(v, "at_ms");
    cr_assert(cJSON_IsBool(adm) && cJSON_IsNumber(at), "%s: rate_limit %s",
              w->run, pl_step_id(s));
    w->takes++;
    if (!cJSON_IsTrue(adm)) {
        w->refused++;
        return 0;
    }
    long long win = (long long)at->valuedouble / WORKFLOW_RATE_WINDOW_MS;
    size_t slot = (size_t)(win % 4096);
    if (w->window_of[slot] != win) {
        cr_assert_eq(w->windows[slot], 0, "rate windows collide");
        w->window_of[slot] = win;
    }
    if (++w->windows[slot] > w->worst)
        w->worst = w->windows[slot];
    return 0;
}

/* When the result of the call whose idempotency key is @p key was
 * appended to its caller's ledger (Unix us): the caller's results match
 * its calls first in, first out (a fan-out's come in argument order). */
int64_t wf_result_us(pl_engine *e, const char *key)
{
    const char *slash = strchr(key, '/');
    const char *colon = strrchr(key, ':');
    cr_assert(slash && colon && colon > slash, "key %s", key);
    char run[PL_MAX_RUN_ID + 1], path[64];
    snprintf(run, sizeof run, "%.*s", (int)(slash - key), key);
    snprintf(path, sizeof path, "%.*s", (int)(colon - slash - 1), slash + 1);
    long seq = strtol(colon + 1, NULL, 10);
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, run, path), PL_OK, "%s: %s", key,
                 pl_errmsg());
    long pending[64];
    int head = 0, tail = 0;
    int64_t at = 0;
    for (size_t i = 0; i < pl_steps_count(l) && !at; i++) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) == PL_STEP_ACTION_CALL) {
            cr_assert_lt(tail, 64);
            pending[tail++] = (long)i;
        } else if (pl_step_type_of(s) == PL_STEP_ACTION_RESULT && head < tail &&
                   pending[head++] == seq) {
            at = pl_step_time_us(s);
        }
    }
    pl_steps_free(l);
    cr_assert(at, "%s: no result in its caller's ledger", key);
    return at;
}

/* ---- what the MCP server heard ------------------------------------------- */

void fx_mcp_calls(const char *log, int *distinct, int *total)
{
    *distinct = *total = 0;
    FILE *f = fopen(log, "r");
    if (!f)
        return;
    char **keys = NULL;
    size_t cap = 0;
    char *line = NULL;
    size_t n = 0;
    while (getline(&line, &n, f) > 0) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "method");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "params");
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(p, "_meta");
        const cJSON *key = cJSON_GetObjectItemCaseSensitive(
            meta, "policyledger/idempotencyKey");
        if (cJSON_IsString(m) && !strcmp(m->valuestring, "tools/call")) {
            cr_assert(cJSON_IsString(key), "a call without its key: %s", line);
            int k = 0;
            while (k < *distinct && strcmp(keys[k], key->valuestring))
                k++;
            if (k == *distinct) {
                keys = grow(keys, &cap, (size_t)k + 1, sizeof *keys);
                keys[k] = strdup(key->valuestring);
                cr_assert(keys[k]);
                ++*distinct;
            }
            ++*total;
        }
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    for (int k = 0; k < *distinct; k++)
        free(keys[k]);
    free(keys);
}
