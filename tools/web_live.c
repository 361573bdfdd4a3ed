/*
 * web_live.c -- what ledger-web does in the background, and the views
 * built on it.
 *
 * COUNTS.  The runs per status are counted by a thread of their own that
 * reads every run record (pl_engine_runs(): short read transactions, a
 * record at a time in memory) at start, then again after the store
 * changed, at most once every max(5 s, 4 x the last count's duration): so
 * counting a large store takes a bounded share of one core, and a count is
 * at most that old (the API gives counts_as_of and counts_complete, false
 * while the first count runs).  The same pass keeps the oldest runs
 * waiting (suspended or submitted) and the unfinished runs to watch.
 *
 * CHANGES.  The poller reads the store's change mark (pl_engine_change_mark:
 * one cheap read) every WEB_POLL_MS; when it moved, it lists the runs
 * whose ids follow the newest it knows and re-reads the unfinished runs it
 * watches (the newest WEB_WATCH_MAX), and publishes an event for each new or
 * changed run, then one "change" event.  It re-reads the watched runs every
 * few seconds even when nothing was written, since a run's owner can die
 * without writing.  Events wait in a ring of WEB_EVENTS for the
 * Server-Sent Events streams (at most WEB_SSE_MAX); a stream that fell
 * behind the ring gets a "reset" event and reloads.  A run given an id of
 * its own that sorts before the newest is not in the poller's listing: the
 * next count, which reads every record, announces each run made since
 * the count before it (ANNOUNCE_MARGIN_US earlier) that was not announced.
 *
 * DAMAGED RUNS.  A run record that cannot be read (its checksum fails) is
 * passed over by every listing here (cli_runs_each()): the counts count it
 * apart ("damaged"), the poller announces it once, as a run whose "state"
 * is "damaged", and stops watching it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "web.h"

#define COUNT_MIN_US 5000000 /* counts are never re-read more often */
#define RECHECK_POLLS 10     /* watched runs re-read every N polls anyway */
#define NEW_MAX 100          /* new runs announced per poll */
/* a count announces the runs made since the count before it began, less
 * this: a run made just before is committed after that count read past */
#define ANNOUNCE_MARGIN_US 5000000

static void announce_new(web *w, const pl_run_info *ri);

static bool stopping(web *w)
{
    pthread_mutex_lock(&w->mu);
    bool s = w->stopping;
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* ---- counts -------------------------------------------------------------------- */

typedef struct count {
    web *w;
    int64_t since_us; /* runs made since are announced, if not yet */
    uint64_t counts[WEB_STATUS_N], total;
    web_oldest oldest[WEB_OLDEST_MAX];
    size_t n_oldest;
    web_watch *watch; /* a ring of the newest unfinished runs */
    size_t n_watch, next;
    uint64_t damaged;
    bool stopped;
} count;

static int count_visit(const pl_run_info *ri, void *user)
{
    count *c = user;
    if (ri->created_us >= c->since_us) {
        pthread_mutex_lock(&c->w->mu);
        announce_new(c->w, ri);
        pthread_mutex_unlock(&c->w->mu);
    }
    if (crashed(ri))
        c->counts[WEB_CRASHED]++;
    else if ((unsigned)ri->status < WEB_STATUS_N)
        c->counts[ri->status]++;
    c->total++;
    if ((ri->status == PL_RUN_SUSPENDED || ri->status == PL_RUN_SUBMITTED ||
         ri->status == PL_RUN_WAITING) &&
        c->n_oldest < WEB_OLDEST_MAX) {
        web_oldest *o = &c->oldest[c->n_oldest++];
        snprintf(o->id, sizeof o->id, "%s", ri->id);
        snprintf(o->policy, sizeof o->policy, "%s", ri->policy);
        o->created_us = ri->created_us;
        o->updated_us = ri->updated_us;
    }
    if (!run_ended(ri)) {
        web_watch *e = &c->watch[c->next];
        char *id = cli_strdup(ri->id);
        if (id) {
            free(e->id);
            *e = (web_watch){id, (int)ri->status, crashed(ri), ri->steps,
                             ri->updated_us};
            c->next = (c->next + 1) % WEB_WATCH_MAX;
            if (c->n_watch < WEB_WATCH_MAX)
                c->n_watch++;
        }
    }
    /* progress for the first count, and a way out */
    if (c->total % 4096 == 0) {
        pthread_mutex_lock(&c->w->mu);
        if (!c->w->counts_complete) {
            memcpy(c->w->counts, c->counts, sizeof c->counts);
            c->w->counts_total = c->total;
        }
        c->stopped = c->w->stopping;
        pthread_mutex_unlock(&c->w->mu);
        if (c->stopped)
            return 1;
    }
    return 0;
}

static int count_damaged(const char *id, const char *msg, void *user)
{
    (void)id;
    (void)msg;
    count *c = user;
    c->damaged++;
    c->total++;
    return 0;
}

static void watch_free(web_watch *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].id);
    free(v);
}

/*
 * Watch the unfinished run @p e (its id moved to the watched set, else
 * left to the caller to free), so that the set holds the newest
 * WEB_WATCH_MAX unfinished runs: a run watched already keeps what was last
 * announced of it; with no room, the newest run takes the place of the
 * oldest watched (the least id: the list's order, creation order for the
 * engine's ids), which is no longer watched.  Under w->mu.
 */
static void watch_add(web *w, web_watch *e)
{
    size_t oldest = 0;
    for (size_t i = 0; i < w->n_watch; i++) {
        if (!strcmp(w->watch[i].id, e->id))
            return;
        if (strcmp(w->watch[i].id, w->watch[oldest].id) < 0)
            oldest = i;
    }
    if (w->n_watch < WEB_WATCH_MAX) {
        w->watch[w->n_watch++] = *e;
    } else if (strcmp(e->id, w->watch[oldest].id) > 0) {
        free(w->watch[oldest].id);
        w->watch[oldest] = *e;
    } else {
        return;
    }
    e->id = NULL; /* moved */
}

static void count_once(web *w)
{
    count c = {.w = w};
    if (!(c.watch = calloc(WEB_WATCH_MAX, sizeof *c.watch)))
        return;
    pthread_mutex_lock(&w->mu);
    c.since_us = w->announce_since_us;
    pthread_mutex_unlock(&w->mu);
    int64_t t0 = cli_now_us();
    int st = cli_runs_each(w->engine, NULL, count_visit, count_damaged, &c);
    int64_t t1 = cli_now_us();
    if (st && !c.stopped)
        cli_error("counting runs: %s", pl_errmsg());
    pthread_mutex_lock(&w->mu);
    if (!st) {
        memcpy(w->counts, c.counts, sizeof c.counts);
        w->counts_total = c.total;
        w->counts_damaged = c.damaged;
        w->counts_complete = true;
        w->counts_as_of_us = t0;
        memcpy(w->oldest, c.oldest, sizeof c.oldest);
        w->n_oldest = c.n_oldest;
        /* the watched set gains the unfinished runs this count found, the
         * newest first: a run watched already keeps what was last
         * announced of it, so that a change this count saw first is still
         * announced by the poller */
        for (size_t k = 0; k < c.n_watch; k++)
            watch_add(
                w, &c.watch[(c.next + WEB_WATCH_MAX - 1 - k) % WEB_WATCH_MAX]);
        /* the next count announces the runs made since this one began
         * (less the margin): those announced before are forgotten */
        if (t0 - ANNOUNCE_MARGIN_US > w->announce_since_us)
            w->announce_since_us = t0 - ANNOUNCE_MARGIN_US;
        size_t k = 0;
        for (size_t i = 0; i < w->n_announced; i++) {
            if (w->announced[i].created_us >= w->announce_since_us)
                w->announced[k++] = w->announced[i];
            else
                free(w->announced[i].id);
        }
        w->n_announced = k;
    }
    w->counts_scan_us = t1 - t0;
    pthread_mutex_unlock(&w->mu);
    watch_free(c.watch, WEB_WATCH_MAX);
}

static void *counter_main(void *arg)
{
    web *w = arg;
    pthread_mutex_lock(&w->mu);
    w->counts_dirty = true;
    while (!w->stopping) {
        int64_t gap = 4 * w->counts_scan_us;
        if (gap < COUNT_MIN_US)
            gap = COUNT_MIN_US;
        int64_t due = w->counts_as_of_us + gap;
        if (w->counts_dirty && (!w->counts_complete || cli_now_us() >= due)) {
            w->counts_dirty = false;
            pthread_mutex_unlock(&w->mu);
            count_once(w);
            pthread_mutex_lock(&w->mu);
            continue;
        }
        struct timespec ts = cli_deadline_ms(1000);
        pthread_cond_timedwait(&w->wake, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

bool web_counts_json(web *w, cJSON *into)
{
    cJSON *c = cJSON_AddObjectToObject(into, "counts");
    if (!c)
        return false;
    pthread_mutex_lock(&w->mu);
    uint64_t counts[WEB_STATUS_N];
    memcpy(counts, w->counts, sizeof counts);
    uint64_t total = w->counts_total, damaged = w->counts_damaged;
    bool complete = w->counts_complete;
    int64_t as_of = w->counts_as_of_us;
    pthread_mutex_unlock(&w->mu);
    bool ok = cJSON_AddNumberToObject(c, "crashed",
                                      (double)counts[WEB_CRASHED]);
    for (int s = 1; ok && s < WEB_STATUS_N; s++)
        if (pl_run_status_name((pl_run_status)s))
            ok = cJSON_AddNumberToObject(c,
                                         pl_run_status_name((pl_run_status)s),
                                         (double)counts[s]) != NULL;
    ok = ok && cJSON_AddNumberToObject(c, "damaged", (double)damaged);
    char t[48];
    cli_time_iso(t, sizeof t, as_of, false);
    return ok && cJSON_AddNumberToObject(into, "counts_total", (double)total) &&
           cJSON_AddBoolToObject(into, "counts_complete", complete) &&
           (complete ? cJSON_AddStringToObject(into, "counts_as_of", t)
                     : cJSON_AddNullToObject(into, "counts_as_of"));
}

/* ---- events ------------------------------------------------------------------------ */

/* Publish one event (under w->mu). */
static void publish(web *w, const char *type, cJSON *data)
{
    /* UTF-8, no control character raw and no markup, as every answer
     * (cli_json_safe(), web_json_inert()) */
    char *text = data ? cli_json_safe(pl_json_print(data, false)) : NULL;
    if (text)
        text = web_json_inert(text);
    cJSON_Delete(data);
    if (!text)
        return;
    uint64_t seq = ++w->event_seq;
    web_event *e = &w->events[seq % WEB_EVENTS];
    free(e->text);
    e->seq = seq;
    e->text = NULL;
    size_t n = strlen(text) + strlen(type) + 64;
    if ((e->text = malloc(n)))
        snprintf(e->text, n, "id: %llu\nevent: %s\ndata: %s\n\n",
                 (unsigned long long)seq, type, text);
    free(text);
    pthread_cond_broadcast(&w->changed);
}

static cJSON *run_event(const pl_run_info *ri, const char *what)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "change", what);
    cJSON_AddStringToObject(o, "id", ri->id);
    cJSON_AddStringToObject(o, "status", pl_run_status_name(ri->status));
    cJSON_AddStringToObject(o, "state", web_status_name(ri));
    cJSON_AddBoolToObject(o, "crashed", crashed(ri));
    cJSON_AddStringToObject(o, "root_policy", ri->policy);
    cJSON_AddNumberToObject(o, "steps", (double)ri->steps);
    cli_json_add_int(o, "created_us", ri->created_us);
    cli_json_add_int(o, "updated_us", ri->updated_us);
    return o;
}

/* A run whose record cannot be read, as an event: the list's row
 * (web_damaged_json()) and the change. */
static cJSON *damaged_event(const char *id, const char *msg, const char *what)
{
    cJSON *o = web_damaged_json(id, msg);
    if (o && !cJSON_AddStringToObject(o, "change", what)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Where run @p id is, or would be, in the announced runs (by id); *found
 * says whether it is there.  Under w->mu. */
static size_t announced_at(const web *w, const char *id, bool *found)
{
    size_t lo = 0, hi = w->n_announced;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(w->announced[mid].id, id);
        if (!c) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

/* Announce run @p ri "new", once, and watch it if it is unfinished.
 * Under w->mu. */
static void announce_new(web *w, const pl_run_info *ri)
{
    bool found;
    size_t at = announced_at(w, ri->id, &found);
    if (found)
        return;
    if (w->n_announced == w->cap_announced) {
        size_t cap = w->cap_announced ? 2 * w->cap_announced : 64;
        web_announced *v = realloc(w->announced, cap * sizeof *v);
        if (v) {
            w->announced = v;
            w->cap_announced = cap;
        }
    }
    char *id = w->n_announced < w->cap_announced ? cli_strdup(ri->id) : NULL;
    if (id) { /* else announced, maybe again by the next count */
        memmove(&w->announced[at + 1], &w->announced[at],
                (w->n_announced - at) * sizeof *w->announced);
        w->announced[at] = (web_announced){id, ri->created_us};
        w->n_announced++;
    }
    publish(w, "run", run_event(ri, "new"));
    if (!run_ended(ri)) {
        web_watch e = {cli_strdup(ri->id), (int)ri->status, crashed(ri),
                       ri->steps, ri->updated_us};
        if (e.id)
            watch_add(w, &e);
        free(e.id); /* not taken: watched already, or older than all */
    }
}

bool web_sse_enter(web *w)
{
    pthread_mutex_lock(&w->mu);
    bool ok = w->sse < WEB_SSE_MAX && !w->stopping;
    if (ok)
        w->sse++;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

void web_sse_leave(web *w)
{
    pthread_mutex_lock(&w->mu);
    w->sse--;
    pthread_mutex_unlock(&w->mu);
}

void web_sse_kick(web *w)
{
    pthread_mutex_lock(&w->mu);
    w->sse_kicks++;
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->mu);
}

long web_sse_next(web *w, uint64_t *seq, char *buf, size_t n, int wait_ms)
{
    struct timespec ts = cli_deadline_ms(wait_ms);
    long len = 0;
    pthread_mutex_lock(&w->mu);
    uint64_t kicks = w->sse_kicks;
    while (!w->stopping && w->event_seq == *seq && w->sse_kicks == kicks)
        if (pthread_cond_timedwait(&w->changed, &w->mu, &ts) == ETIMEDOUT)
            break;
    if (w->stopping) {
        len = -1;
    } else if (w->event_seq - *seq > WEB_EVENTS - 1) {
        *seq = w->event_seq; /* fell behind the ring */
        len = snprintf(buf, n, "event: reset\ndata: {}\n\n");
    } else if (w->event_seq != *seq) {
        const web_event *e = &w->events[(*seq + 1) % WEB_EVENTS];
        (*seq)++;
        size_t tl = e->text ? strlen(e->text) : 0;
        if (tl && tl < n) {
            memcpy(buf, e->text, tl);
            len = (long)tl;
        } else {
            len = snprintf(buf, n, "event: reset\ndata: {}\n\n");
        }
    }
    pthread_mutex_unlock(&w->mu);
    return len;
}

/* ---- the poller ---------------------------------------------------------------------- */

typedef struct fresh {
    web *w;
    size_t n;
} fresh;

static int fresh_visit(const pl_run_info *ri, void *user)
{
    fresh *f = user;
    web *w = f->w;
    if (f->n++ == NEW_MAX)
        return 1;
    pthread_mutex_lock(&w->mu);
    snprintf(w->newest, sizeof w->newest, "%s", ri->id);
    announce_new(w, ri);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static int fresh_damaged(const char *id, const char *msg, void *user)
{
    fresh *f = user;
    web *w = f->w;
    if (f->n++ == NEW_MAX)
        return 1;
    pthread_mutex_lock(&w->mu);
    snprintf(w->newest, sizeof w->newest, "%s", id);
    publish(w, "run", damaged_event(id, msg, "new"));
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* Stop watching the run at @p k of the watched (under w->mu). */
static void unwatch(web *w, size_t k)
{
    free(w->watch[k].id);
    w->watch[k] = w->watch[--w->n_watch];
    w->watch[w->n_watch] = (web_watch){0};
}

/* A watched run whose record cannot be read now: announced, not watched
 * any more (it would fail the same way at every poll). */
static void watched_damaged(web *w, const char *id)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", pl_errmsg());
    pthread_mutex_lock(&w->mu);
    for (size_t k = 0; k < w->n_watch; k++)
        if (!strcmp(w->watch[k].id, id)) {
            publish(w, "run", damaged_event(id, msg, "damaged"));
            unwatch(w, k);
            break;
        }
    pthread_mutex_unlock(&w->mu);
}

/* Re-read the watched runs; announce the changed, drop the finished. */
static void recheck(web *w)
{
    pthread_mutex_lock(&w->mu);
    size_t n = w->n_watch;
    char **ids = calloc(n ? n : 1, sizeof *ids);
    for (size_t i = 0; ids && i < n; i++)
        ids[i] = cli_strdup(w->watch[i].id);
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; ids && i < n && !stopping(w); i++) {
        pl_run_info *ri = NULL;
        int st = ids[i] ? pl_run_get(&ri, w->engine, ids[i]) : PL_ENOMEM;
        if (st == PL_ECORRUPT)
            watched_damaged(w, ids[i]);
        if (st)
            continue;
        pthread_mutex_lock(&w->mu);
        for (size_t k = 0; k < w->n_watch; k++) {
            web_watch *e = &w->watch[k];
            if (strcmp(e->id, ri->id) != 0)
                continue;
            if (e->status != (int)ri->status || e->crashed != crashed(ri) ||
                e->steps != ri->steps || e->updated_us != ri->updated_us) {
                publish(w, "run",
                        run_event(ri, e->status != (int)ri->status ||
                                              e->crashed != crashed(ri)
                                          ? "status"
                                          : "steps"));
                e->status = (int)ri->status;
                e->crashed = crashed(ri);
                e->steps = ri->steps;
                e->updated_us = ri->updated_us;
            }
            if (run_ended(ri))
                unwatch(w, k);
            break;
        }
        pthread_mutex_unlock(&w->mu);
        pl_run_info_free(ri);
    }
    for (size_t i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
}

/* The newest run's id, where the poller starts looking for new ones,
 * whether its record can be read or not. */
static int newest_visit(const pl_run_info *ri, void *user)
{
    web *w = user;
    snprintf(w->newest, sizeof w->newest, "%s", ri->id);
    return 1;
}

static int newest_damaged(const char *id, const char *msg, void *user)
{
    (void)msg;
    web *w = user;
    snprintf(w->newest, sizeof w->newest, "%s", id);
    return 1;
}

static int find_newest(web *w)
{
    pl_runs_options o = PL_RUNS_OPTIONS_INIT;
    o.reverse = true;
    return cli_runs_each(w->engine, &o, newest_visit, newest_damaged, w);
}

static void *poller_main(void *arg)
{
    web *w = arg;
    unsigned polls = 0;
    while (!stopping(w)) {
        uint64_t mark = 0;
        bool moved = false;
        if (pl_engine_change_mark(&mark, w->engine) == PL_OK) {
            pthread_mutex_lock(&w->mu);
            moved = mark != w->mark;
            w->mark = mark;
            pthread_mutex_unlock(&w->mu);
        }
        if (moved) {
            char after[PL_MAX_RUN_ID + 1];
            pthread_mutex_lock(&w->mu);
            snprintf(after, sizeof after, "%s", w->newest);
            pthread_mutex_unlock(&w->mu);
            pl_runs_options o = PL_RUNS_OPTIONS_INIT;
            o.after = after;
            fresh f = {w, 0};
            (void)cli_runs_each(w->engine, &o, fresh_visit, fresh_damaged, &f);
            if (f.n > NEW_MAX) {
                /* more than a poll announces: the rest only as the
                 * "change" below, and the next poll starts at the newest */
                pthread_mutex_lock(&w->mu);
                (void)find_newest(w);
                pthread_mutex_unlock(&w->mu);
            }
        }
        if (moved || ++polls % RECHECK_POLLS == 0)
            recheck(w);
        pthread_mutex_lock(&w->mu);
        if (moved) {
            cJSON *d = cJSON_CreateObject();
            if (d)
                cJSON_AddNumberToObject(d, "mark", (double)mark);
            publish(w, "change", d);
            w->counts_dirty = true;
            pthread_cond_signal(&w->wake);
        }
        struct timespec ts = cli_deadline_ms(WEB_POLL_MS);
        while (!w->stopping &&
               pthread_cond_timedwait(&w->wake, &w->mu, &ts) != ETIMEDOUT) {
        }
        pthread_mutex_unlock(&w->mu);
    }
    return NULL;
}

bool web_live_open(web *w)
{
    if (pthread_mutex_init(&w->mu, NULL) || !cli_cond_init_mono(&w->changed) ||
        !cli_cond_init_mono(&w->wake)) {
        cli_error("cannot make a lock");
        return false;
    }
    w->mu_ready = true;
    if (!(w->watch = calloc(WEB_WATCH_MAX, sizeof *w->watch))) {
        cli_error("out of memory");
        return false;
    }
    int st = find_newest(w);
    if (st < 0) {
        cli_error("cannot list the runs of %s: %s", QUOTE(w->store),
                  pl_errmsg());
        return false;
    }
    (void)pl_engine_change_mark(&w->mark, w->engine);
    w->announce_since_us = cli_now_us(); /* the runs there now are known */
    return true;
}

bool web_live_start(web *w)
{
    if (!web_live_open(w))
        return false;
    if (pthread_create(&w->counter, NULL, counter_main, w)) {
        cli_error("cannot start a thread");
        return false;
    }
    if (pthread_create(&w->poller, NULL, poller_main, w)) {
        pthread_mutex_lock(&w->mu);
        w->stopping = true;
        pthread_cond_broadcast(&w->wake);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->counter, NULL);
        cli_error("cannot start a thread");
        return false;
    }
    w->threads = true;
    return true;
}

void web_live_stop(web *w)
{
    if (!w->mu_ready)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_broadcast(&w->wake);
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->mu);
    if (w->threads) {
        pthread_join(w->counter, NULL);
        pthread_join(w->poller, NULL);
        w->threads = false;
    }
    watch_free(w->watch, w->n_watch);
    w->watch = NULL;
    w->n_watch = 0;
    for (size_t i = 0; i < w->n_announced; i++)
        free(w->announced[i].id);
    free(w->announced);
    w->announced = NULL;
    w->n_announced = w->cap_announced = 0;
    for (size_t i = 0; i < WEB_EVENTS; i++)
        free(w->events[i].text);
    pthread_cond_destroy(&w->changed);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mu);
    w->mu_ready = false;
}
