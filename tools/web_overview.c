/*
 * web_overview.c -- GET /api/overview?window=hour|day: what an operator
 * looks at first.
 *
 *   buckets     runs per time bucket (a minute over the last hour, 15
 *               minutes over the last day) by the status they are in
 *               (completed, failed, cancelled, suspended, waiting,
 *               crashed), by their last update
 *   latency     p50 and p95 of call durations per called policy
 *   tokens      model tokens per model per bucket, from the exchanges
 *               each model records
 *   waiting     the oldest runs waiting (suspended, submitted, or waiting
 *               for a time or an event), from the counts (web_live.c)
 *
 * Bounded: the newest WEB_SCAN_MAX runs are read (newest first: for the
 * engine's ids, creation order), and the steps of at most SAMPLE_RUNS of
 * those in the window, streamed one at a time (pl_run_walk()): the first
 * SAMPLE_RUN_STEPS of each run, SAMPLE_STEPS in all.  Only the calls
 * awaiting their answer are held (the callee's name and the call's time);
 * a latency is kept for a call answered in the window.  The answer says
 * how much was read ("scanned" runs, "sampled" runs, "sampled_steps").
 *
 *   damaged     the runs read whose record cannot be read (its checksum
 *               fails), the first DAMAGED_SHOWN of them as the list shows
 *               them (web_damaged_json()), and their number
 *               ("damaged_total"); the listing goes on past them
 */
#include <stdlib.h>
#include <string.h>

#include "web.h"

#define SAMPLE_RUNS 200       /* runs whose steps are read */
#define SAMPLE_RUN_STEPS 2000 /* steps read of one run, at most */
#define SAMPLE_STEPS 20000    /* steps read in all, at most */
#define POLICIES_MAX 64       /* policies (and models) shown */
#define BUCKETS_MAX 96
#define DAMAGED_SHOWN 20 /* damaged runs named */

typedef struct series {
    char name[PL_MAX_NAME + 1];
    double *v; /* durations (latency); unused for tokens */
    size_t n, cap;
    uint64_t tin[BUCKETS_MAX], tout[BUCKETS_MAX];
} series;

typedef struct ov {
    web *w;
    int64_t from_us, now_us, bucket_us;
    unsigned n_buckets;
    /* completed, failed, suspended, crashed, cancelled, waiting */
    uint64_t ended[BUCKETS_MAX][6];
    size_t scanned, sampled, steps;
    char (*sample_ids)[PL_MAX_RUN_ID + 1];
    size_t n_sample;
    series lat[POLICIES_MAX], tok[POLICIES_MAX];
    size_t n_lat, n_tok;
    cJSON *damaged; /* the first DAMAGED_SHOWN */
    size_t n_damaged;
    bool truncated, oom;
} ov;

static series *series_of(series *v, size_t *n, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(v[i].name, name))
            return &v[i];
    if (*n == POLICIES_MAX)
        return NULL;
    series *s = &v[(*n)++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

static int bucket_of(const ov *o, int64_t t)
{
    if (t < o->from_us || t > o->now_us)
        return -1;
    int64_t b = (t - o->from_us) / o->bucket_us;
    return b >= o->n_buckets ? (int)o->n_buckets - 1 : (int)b;
}

static int ov_visit(const pl_run_info *ri, void *user)
{
    ov *o = user;
    if (o->scanned == WEB_SCAN_MAX) {
        o->truncated = true;
        return 1;
    }
    o->scanned++;
    int b = bucket_of(o, ri->updated_us);
    if (b >= 0) {
        int k = crashed(ri)                      ? 3
                : ri->status == PL_RUN_COMPLETED ? 0
                : ri->status == PL_RUN_FAILED    ? 1
                : ri->status == PL_RUN_SUSPENDED ? 2
                : ri->status == PL_RUN_CANCELLED ? 4
                : ri->status == PL_RUN_WAITING   ? 5
                                                 : -1;
        if (k >= 0)
            o->ended[b][k]++;
    }
    if ((b >= 0 || bucket_of(o, ri->created_us) >= 0) &&
        o->n_sample < SAMPLE_RUNS && ri->steps > 0)
        snprintf(o->sample_ids[o->n_sample++], PL_MAX_RUN_ID + 1, "%s", ri->id);
    return 0;
}

static int ov_damaged(const char *id, const char *msg, void *user)
{
    ov *o = user;
    if (o->scanned == WEB_SCAN_MAX) {
        o->truncated = true;
        return 1;
    }
    o->scanned++;
    if (o->n_damaged++ < DAMAGED_SHOWN) {
        cJSON *j = web_damaged_json(id, msg);
        if (!j) {
            o->oom = true;
            return 1;
        }
        cJSON_AddItemToArray(o->damaged, j);
    }
    return 0;
}

/* A call awaiting its answer in a walk: whom it called, and when. */
typedef struct ov_pending {
    char callee[PL_MAX_NAME + 1];
    int64_t time_us;
} ov_pending;

/* One sampled run's walk. */
typedef struct ov_walk {
    ov *o;
    web_tracker t;
    const pl_step *cur; /* the step being fed */
    size_t steps;
    bool oom;
} ov_walk;

static bool add_latency(series *s, double ms)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        double *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return false;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = ms;
    return true;
}

/* A call's end: answered by the step being fed (x->cur), or never. */
static void ov_end(void *call, bool answered, void *user)
{
    ov_walk *x = user;
    ov_pending *c = call;
    ov *o = x->o;
    int b = answered ? bucket_of(o, pl_step_time_us(x->cur)) : -1;
    if (b < 0) {
        free(c);
        return;
    }
    series *s = series_of(o->lat, &o->n_lat, c->callee);
    if (s &&
        !add_latency(s, (double)(pl_step_time_us(x->cur) - c->time_us) / 1e3))
        x->oom = true;
    free(c);
}

static uint64_t count_of(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 1e15
               ? (uint64_t)v->valuedouble
               : 0;
}

/* A model exchange (the side effect "llm_exchange" a model policy records
 * for each request it sends, {"usage": {"input", "output"}}): its tokens,
 * for the model that made it (its actor), in the bucket it was made in. */
static void ov_exchange(ov *o, const pl_step *s)
{
    const cJSON *p = pl_step_payload(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
    int b = bucket_of(o, pl_step_time_us(s));
    if (b < 0 || !cJSON_IsString(name) ||
        strcmp(name->valuestring, "llm_exchange") != 0)
        return;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(p, "value"), "usage");
    series *t = series_of(o->tok, &o->n_tok, pl_step_actor(s));
    if (t) {
        t->tin[b] += count_of(u, "input");
        t->tout[b] += count_of(u, "output");
    }
}

static int ov_step(const pl_step *s, void *user)
{
    ov_walk *x = user;
    if (x->steps == SAMPLE_RUN_STEPS || x->o->steps == SAMPLE_STEPS)
        return 1;
    x->steps++;
    x->o->steps++;
    char path[WEB_STEP_ID_MAX + 1];
    web_step_path(s, path, sizeof path);
    pl_step_type type = pl_step_type_of(s);
    if (type == PL_STEP_SIDE_EFFECT)
        ov_exchange(x->o, s);
    ov_pending *c = NULL;
    if (type == PL_STEP_ACTION_CALL) {
        if (!(c = malloc(sizeof *c))) {
            x->oom = true;
            return 1;
        }
        /* the callee, as the timeline names it */
        const cJSON *pol = cJSON_GetObjectItemCaseSensitive(pl_step_payload(s),
                                                            "policy");
        snprintf(c->callee, sizeof c->callee, "%s",
                 cJSON_IsString(pol) ? pol->valuestring : pl_step_actor(s));
        c->time_us = pl_step_time_us(s);
    }
    x->cur = s;
    if (!web_track(&x->t, path, type, c, ov_end, x)) {
        free(c);
        x->oom = true;
    }
    x->cur = NULL;
    return x->oom;
}

/* Read a sampled run's first steps, a step at a time. */
static int ov_sample(ov *o, const char *id)
{
    ov_walk x = {.o = o};
    int st = pl_run_walk(o->w->engine, id, ov_step, &x);
    /* the calls still awaiting an answer where the walk stopped */
    web_track(&x.t, NULL, PL_STEP_TEXT, NULL, ov_end, &x);
    web_track_free(&x.t);
    if (x.oom)
        return PL_ENOMEM;
    return st > 0 ? PL_OK : st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *v, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static bool add_json(ov *o, cJSON *doc)
{
    cJSON *b = cJSON_AddArrayToObject(doc, "buckets");
    for (unsigned i = 0; b && i < o->n_buckets; i++) {
        cJSON *e = cJSON_CreateObject();
        if (!e)
            return false;
        cJSON_AddItemToArray(b, e);
        cli_json_add_int(e, "start_us", (o->from_us + i * o->bucket_us));
        cJSON_AddNumberToObject(e, "completed", (double)o->ended[i][0]);
        cJSON_AddNumberToObject(e, "failed", (double)o->ended[i][1]);
        cJSON_AddNumberToObject(e, "suspended", (double)o->ended[i][2]);
        cJSON_AddNumberToObject(e, "crashed", (double)o->ended[i][3]);
        cJSON_AddNumberToObject(e, "cancelled", (double)o->ended[i][4]);
        cJSON_AddNumberToObject(e, "waiting", (double)o->ended[i][5]);
    }
    cJSON *lat = cJSON_AddArrayToObject(doc, "latency");
    for (size_t i = 0; lat && i < o->n_lat; i++) {
        series *s = &o->lat[i];
        if (!s->n)
            continue;
        qsort(s->v, s->n, sizeof *s->v, cmp_double);
        cJSON *e = cJSON_CreateObject();
        if (!e)
            return false;
        cJSON_AddItemToArray(lat, e);
        cJSON_AddStringToObject(e, "policy", s->name);
        cJSON_AddNumberToObject(e, "calls", (double)s->n);
        cJSON_AddNumberToObject(e, "p50_ms", pct(s->v, s->n, 0.50));
        cJSON_AddNumberToObject(e, "p95_ms", pct(s->v, s->n, 0.95));
    }
    cJSON *tok = cJSON_AddArrayToObject(doc, "tokens");
    for (size_t i = 0; tok && i < o->n_tok; i++) {
        cJSON *e = cJSON_CreateObject(), *in = cJSON_CreateArray(),
              *out = cJSON_CreateArray();
        if (!e || !in || !out) {
            cJSON_Delete(e);
            cJSON_Delete(in);
            cJSON_Delete(out);
            return false;
        }
        cJSON_AddItemToArray(tok, e);
        cJSON_AddStringToObject(e, "model", o->tok[i].name);
        for (unsigned k = 0; k < o->n_buckets; k++) {
            cJSON_AddItemToArray(in,
                                 cJSON_CreateNumber((double)o->tok[i].tin[k]));
            cJSON_AddItemToArray(out,
                                 cJSON_CreateNumber((double)o->tok[i].tout[k]));
        }
        cJSON_AddItemToObject(e, "input", in);
        cJSON_AddItemToObject(e, "output", out);
    }
    cJSON *wait = cJSON_AddArrayToObject(doc, "waiting");
    web *w = o->w;
    web_oldest old[WEB_OLDEST_MAX];
    pthread_mutex_lock(&w->mu);
    size_t n_old = w->n_oldest;
    memcpy(old, w->oldest, n_old * sizeof *old);
    pthread_mutex_unlock(&w->mu);
    /* the counts' list is as of their last pass: each run is read again,
     * so one answered, cancelled or finished since is not shown waiting */
    for (size_t i = 0; wait && i < n_old; i++) {
        pl_run_info *ri = NULL;
        if (pl_run_get(&ri, w->engine, old[i].id))
            continue; /* gone, or unreadable now: not shown */
        bool still = ri->status == PL_RUN_SUSPENDED ||
                     ri->status == PL_RUN_SUBMITTED ||
                     ri->status == PL_RUN_WAITING;
        int64_t updated = ri->updated_us;
        pl_run_info_free(ri);
        if (!still)
            continue;
        cJSON *e = cJSON_CreateObject();
        if (!e)
            break;
        cJSON_AddItemToArray(wait, e);
        cJSON_AddStringToObject(e, "id", old[i].id);
        cJSON_AddStringToObject(e, "root_policy", old[i].policy);
        cli_json_add_int(e, "created_us", old[i].created_us);
        cli_json_add_int(e, "updated_us", updated);
    }
    return b && lat && tok && wait;
}

int api_overview(web *w, const web_req *r, cJSON **out)
{
    const char *win = web_arg(r, "window");
    if (win && !*win) /* "window=" is not given, as for every parameter */
        win = NULL;
    bool day = win && !strcmp(win, "day");
    if (win && !day && strcmp(win, "hour") != 0)
        return web_fail(out, 400, "bad_window", "window: hour or day");
    ov *o = calloc(1, sizeof *o);
    if (!o || !(o->sample_ids = calloc(SAMPLE_RUNS, sizeof *o->sample_ids)) ||
        !(o->damaged = cJSON_CreateArray())) {
        if (o)
            free(o->sample_ids);
        free(o);
        return web_fail(out, 500, "PL_ENOMEM", "out of memory");
    }
    o->w = w;
    o->now_us = cli_now_us();
    o->n_buckets = day ? 96 : 60;
    o->bucket_us = day ? 15 * 60 * 1000000LL : 60 * 1000000LL;
    o->from_us = o->now_us - (int64_t)o->n_buckets * o->bucket_us;
    pl_runs_options ro = PL_RUNS_OPTIONS_INIT;
    ro.reverse = true;
    int st = cli_runs_each(w->engine, &ro, ov_visit, ov_damaged, o);
    int http = 200;
    if (o->oom)
        http = web_fail(out, 500, "PL_ENOMEM", "out of memory");
    else if (st < 0)
        http = web_fail_status(out, st, "listing runs");
    /* a run deleted or unreadable since it was listed is passed over */
    for (size_t i = 0; http == 200 && i < o->n_sample; i++) {
        if (o->steps == SAMPLE_STEPS)
            break;
        st = ov_sample(o, o->sample_ids[i]);
        if (st == PL_ENOMEM)
            http = web_fail(out, 500, "PL_ENOMEM", "out of memory");
        else if (!st)
            o->sampled++;
    }
    cJSON *doc = http == 200 ? cJSON_CreateObject() : NULL;
    if (doc) {
        cJSON_AddStringToObject(doc, "window", day ? "day" : "hour");
        cli_json_add_int(doc, "from_us", o->from_us);
        cli_json_add_int(doc, "to_us", o->now_us);
        cli_json_add_int(doc, "bucket_us", o->bucket_us);
        cJSON_AddNumberToObject(doc, "scanned", (double)o->scanned);
        cJSON_AddNumberToObject(doc, "sampled", (double)o->sampled);
        cJSON_AddNumberToObject(doc, "sampled_steps", (double)o->steps);
        cJSON_AddBoolToObject(doc, "truncated", o->truncated);
        cJSON_AddItemToObject(doc, "damaged", o->damaged);
        o->damaged = NULL; /* the document's */
        cJSON_AddNumberToObject(doc, "damaged_total", (double)o->n_damaged);
        if (!add_json(o, doc) || !web_counts_json(w, doc)) {
            cJSON_Delete(doc);
            doc = NULL;
        }
    }
    if (http == 200 && !doc)
        http = web_fail(out, 500, "PL_ENOMEM", "out of memory");
    else if (doc)
        *out = doc;
    for (size_t i = 0; i < o->n_lat; i++)
        free(o->lat[i].v);
    cJSON_Delete(o->damaged);
    free(o->sample_ids);
    free(o);
    return http;
}
