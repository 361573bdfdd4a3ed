/*
 * schedule.c -- schedules: runs started at the ticks of a cron expression
 * (the public header's Schedules says what users see).
 *
 * A schedule is one record in the store (ledger/codec/schedrec.c), with a
 * cursor: the ticks at or before it are handled.  pl_schedule_fire() reads
 * every schedule, and for each whose root policy is registered here, takes
 * the ticks after its cursor up to now, chooses those to start (catch-up
 * and overlap rules), submits a run for each with the id
 * "<name>@<tick in UTC, to the minute>" (and the schedule's priority,
 * concurrency key and deadline after the tick, if it has them), the cursor
 * moved to its tick and naming its run in the run's creating commit, then
 * moves the cursor to the last tick due (when that tick started no run),
 * only ever over the record it read.
 *
 * EXACTLY ONCE.  Any number of processes and hosts may fire at once: a
 * tick's run id is the same for all, and the store creates a run id once
 * (pl_run_submit()'s PL_EEXIST: another fired it first).  A run and the
 * cursor past its tick are one transaction, so a process killed anywhere
 * leaves either both or neither: the next fire never meets a run the
 * cursor does not know of, which the overlap rule would miss (a tick
 * skipped as missed, or dropped by the catch-up, is not looked up).  The
 * cursor only moves over the record read: a schedule put again, or moved
 * on by another process meanwhile, is left as they wrote it, and a tick's
 * run is made only with it (PL_EBUSY otherwise: the fire reads the record
 * again).  A put writes only over the record it read too, so that the
 * last run it keeps is the store's when it writes (docs/design.md §14.1).
 */
#include <stdio.h>
#include <stdlib.h>

#include "cron.h"
#include "internal.h"
#include "run.h"
#include "schedrec.h"

#define GRACE_MS 60000      /* PL_CATCH_UP_SKIP: a tick this late still runs */
#define CATCH_UP_LIMIT 1000 /* PL_CATCH_UP_ALL's N at most */
#define TICKS_SCAN_MAX 1000000 /* ticks walked past the cursor at most */
/* A put that found the schedule changed when it wrote reads it again, at
 * most this often (each change is a fire's or another put's, that went
 * through) before PL_EBUSY */
#define PUT_TRIES 1000

/* ---- put, delete -------------------------------------------------------- */

static int write_rec(pl_engine *e, const char *name, const pl__buf *rec,
                     const pl__buf *expect, bool strict)
{
    pl__batch b;
    memset(&b, 0, sizeof b);
    b.sched_name = name;
    b.sched_rec = rec;
    b.sched_expect = expect;
    b.sched_strict = strict;
    pl__batch *bp = &b;
    return pl__store_commit(e->store, &bp, 1, false);
}

/* Find schedule @p name among @p all: its index, or -1. */
static ptrdiff_t find(const pl__kvs *all, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < all->n; i++)
        if (all->e[i].klen == n && memcmp(pl__kvs_key(all, i), name, n) == 0)
            return (ptrdiff_t)i;
    return -1;
}

/* The options of a tick's run, checked as pl_run_submit() checks them (its
 * messages, after the schedule's name). */
static int run_options_ok(const pl_schedule *s)
{
    char fn[PL__SCHED_NAME_MAX + 16];
    snprintf(fn, sizeof fn, "schedule '%s'", s->name);
    pl_run_options o = PL_RUN_OPTIONS_INIT;
    o.priority = s->priority;
    o.concurrency_key = s->concurrency_key;
    o.concurrency_limit = s->concurrency_limit;
    int st = pl__flow_options_ok(&o, fn, true);
    if (!st &&
        (s->deadline_in_ms < 0 || s->deadline_in_ms > PL__SCHED_DEADLINE_MAX))
        st = pl__err(PL_EINVAL,
                     "%s: a negative or huge deadline "
                     "(deadline_in_ms %lld)",
                     fn, (long long)s->deadline_in_ms);
    return st;
}

/* The checks a definition passes: name, expression, zone, policy, rules,
 * run options. */
static int check_def(const pl_schedule *s, pl__cron *c)
{
    if (!pl__sched_name_ok(s->name))
        return pl__err(PL_EINVAL,
                       "pl_schedule_put: schedule name '%.120s' is not 1..%d "
                       "bytes of [A-Za-z0-9._-]",
                       s->name ? s->name : "(null)", PL__SCHED_NAME_MAX);
    if (!s->cron)
        return pl__err(PL_EINVAL,
                       "pl_schedule_put: schedule '%s' has no "
                       "cron expression",
                       s->name);
    if (pl__cron_parse(c, s->cron))
        return pl__err(PL_EINVAL, "schedule '%s': %s", s->name, pl_errmsg());
    pl__tz *z = NULL;
    if (pl__tz_load(&z, s->zone ? s->zone : "UTC", NULL))
        return pl__err(PL_EINVAL, "schedule '%s': %s", s->name, pl_errmsg());
    pl__tz_free(z);
    if (!s->policy ||
        !pl__actor_ok((const uint8_t *)s->policy, strlen(s->policy)))
        return pl__err(PL_EINVAL,
                       "schedule '%s': a root policy name is "
                       "1..%d bytes without control characters",
                       s->name, PL_MAX_NAME);
    if (s->payload && !cJSON_IsObject(s->payload))
        return pl__err(PL_EJSON,
                       "schedule '%s': the payload must be a JSON "
                       "object",
                       s->name);
    if ((unsigned)s->overlap > PL_OVERLAP_ALLOW)
        return pl__err(PL_EINVAL, "schedule '%s': unknown overlap rule %d",
                       s->name, (int)s->overlap);
    if ((unsigned)s->catch_up > PL_CATCH_UP_ALL)
        return pl__err(PL_EINVAL, "schedule '%s': unknown catch-up rule %d",
                       s->name, (int)s->catch_up);
    if (s->catch_up == PL_CATCH_UP_ALL &&
        (s->catch_up_max < 1 || s->catch_up_max > CATCH_UP_LIMIT))
        return pl__err(PL_EINVAL,
                       "schedule '%s': PL_CATCH_UP_ALL runs 1..%d missed "
                       "ticks, not %u",
                       s->name, CATCH_UP_LIMIT, s->catch_up_max);
    if (s->start_ms < 0)
        return pl__err(PL_EINVAL, "schedule '%s': start_ms is negative",
                       s->name);
    /* no tick is found past it: such a schedule would never fire */
    if (s->start_ms >= PL__CRON_TIME_MAX)
        return pl__err(PL_EINVAL,
                       "schedule '%s': start_ms %lld is past the year 9000, "
                       "the last a schedule ticks in",
                       s->name, (long long)s->start_ms);
    return run_options_ok(s);
}

int pl_schedule_put(pl_engine *e, const pl_schedule *in)
{
    if (!e || !in)
        return pl__err(PL_EINVAL, "pl_schedule_put: NULL %s",
                       !e ? "engine" : "schedule");
    pl_schedule s;
    if (pl__struct_in(&s, in, &pl__schedule_layout, "pl_schedule_put"))
        return PL_EINVAL;
    pl__cron c;
    int st = check_def(&s, &c);
    if (st)
        return st;
    char *payload = cJSON_PrintUnformatted(s.payload ? s.payload
                                                     : pl_json_empty());
    if (!payload)
        return pl__err(PL_ENOMEM, "out of memory");
    if (strlen(payload) > PL__SCHED_PAYLOAD_MAX) {
        free(payload);
        return pl__err(PL_ELIMIT,
                       "schedule '%s': the payload is more than %d bytes of "
                       "JSON",
                       s.name, PL__SCHED_PAYLOAD_MAX);
    }
    /* as pl_run_submit() will check it at every tick: one it refuses
     * (nested too deep, over the engine's max_payload) would fail each
     * fire of the schedule, for good */
    pl__buf enc = {0};
    st = pl__payload_encode(&enc, s.payload, e->max_payload);
    pl__buf_free(&enc);
    if (st) {
        free(payload);
        return pl__err(st, "schedule '%s': %s", s.name, pl_errmsg());
    }
    int64_t now = pl__now_us() / 1000;
    pl__sched_rec r = {
        .cron = (char *)s.cron,
        .zone = (char *)(s.zone ? s.zone : "UTC"),
        .policy = (char *)s.policy,
        .payload = payload,
        .overlap = (unsigned)s.overlap,
        .catch_up = (unsigned)s.catch_up,
        .catch_up_max = s.catch_up == PL_CATCH_UP_ALL ? s.catch_up_max : 0,
        .created_ms = now,
        .cursor_ms = s.start_ms ? s.start_ms : now,
        .last_run = "",
        .priority = s.priority,
        .flow_key = (char *)s.concurrency_key,
        .flow_limit = s.concurrency_limit,
        .deadline_in_ms = s.deadline_in_ms,
    };
    /* a schedule put again keeps the run it started last (overlap), as the
     * store has it when the put writes: the write is strict, only over the
     * record read (or where none is), so a fire that moved the schedule on
     * between the read and the write (its last run, a tick's run) makes
     * the put read it again, never put back the run before */
    pl__buf rec = {0}, was = {0};
    st = PL_EBUSY;
    for (unsigned tries = 0; st == PL_EBUSY && tries < PUT_TRIES; tries++) {
        pl__kvs all = {0};
        pl__sched_rec old;
        rec.len = was.len = 0;
        st = pl__store_scheds(e->store, &all);
        ptrdiff_t at = st ? -1 : find(&all, s.name);
        if (at >= 0)
            st = pl__buf_append(&was, pl__kvs_val(&all, at), all.e[at].vlen);
        bool had = !st && at >= 0 &&
                   !pl__sched_rec_decode(&old, s.name, was.data, was.len);
        r.last_run = had ? old.last_run : "";
        if (!st)
            st = pl__sched_rec_encode(&rec, s.name, &r);
        if (had)
            pl__sched_rec_clear(&old);
        pl__kvs_free(&all);
        /* a new schedule past PL__SCHED_MAX, which would read as a damaged
         * store (no schedule would list, fire or be deleted again), is
         * refused by the store, counted in the transaction that writes it:
         * puts of processes at once are counted one after the other */
        if (!st)
            st = write_rec(e, s.name, &rec, at >= 0 ? &was : NULL, true);
    }
    pl__buf_free(&rec);
    pl__buf_free(&was);
    free(payload);
    return st;
}

int pl_schedule_delete(pl_engine *e, const char *name)
{
    if (!e)
        return pl__err(PL_EINVAL, "pl_schedule_delete: NULL engine");
    if (!pl__sched_name_ok(name))
        return pl__err(PL_EINVAL,
                       "pl_schedule_delete: bad schedule name "
                       "'%.120s'",
                       name ? name : "(null)");
    int rst = pl__engine_writable(e, "pl_schedule_delete");
    if (rst)
        return rst;
    pl__kvs all = {0};
    int st = pl__store_scheds(e->store, &all);
    if (!st && find(&all, name) < 0)
        st = pl__err(PL_ENOTFOUND, "no schedule '%s'", name);
    if (!st)
        st = write_rec(e, name, NULL, NULL, false);
    pl__kvs_free(&all);
    return st;
}

/* ---- listing --------------------------------------------------------------- */

static const char *overlap_name(unsigned v)
{
    return v == PL_OVERLAP_ALLOW ? "allow" : "skip";
}

static const char *catch_up_name(unsigned v)
{
    return v == PL_CATCH_UP_ALL      ? "all"
           : v == PL_CATCH_UP_LATEST ? "latest"
                                     : "skip";
}

/* The next tick of @p c in @p z after @p after_ms: 0 when there is none. */
static int64_t next_tick(const pl__cron *c, const pl__tz *z, int64_t after_ms)
{
    int64_t t;
    return pl__cron_next(&t, c, z, after_ms < 0 ? 0 : after_ms) ? 0 : t;
}

/*
 * The ticks after @p cursor_ms up to @p now_ms that a fire may start: the
 * last @p keep of them in @p ring (tick k of the walk at k % keep), the
 * last in *last; returns how many the walk met.  Only the last `keep` may
 * start, the others being skipped for good, so the walk begins in a window
 * before now, doubled from a minute until it holds `keep` ticks or reaches
 * the cursor: after a pause of years a fire walks about twice the ticks it
 * keeps, not every tick missed (a million of them, at most, took seconds
 * and left the latest unstarted).
 */
static size_t due_ticks(const pl__cron *c, const pl__tz *z, int64_t cursor_ms,
                        int64_t now_ms, int64_t *ring, size_t keep,
                        int64_t *last)
{
    for (int64_t w = 60000;; w *= 2) {
        bool all = cursor_ms >= now_ms || w >= now_ms - cursor_ms;
        int64_t t = all ? cursor_ms : now_ms - w;
        size_t n = 0;
        for (size_t walked = 0; walked < TICKS_SCAN_MAX; walked++) {
            int64_t u = next_tick(c, z, t);
            if (!u || u > now_ms)
                break;
            ring[n++ % keep] = *last = t = u;
        }
        if (all || n >= keep)
            return n;
    }
}

/* A record's expression and zone, ready: PL_ECORRUPT naming the schedule
 * when the stored ones are not (another build's, or changed). */
static int prepare(const char *name, const pl__sched_rec *r, pl__cron *c,
                   pl__tz **z)
{
    if (pl__cron_parse(c, r->cron) || pl__tz_load(z, r->zone, NULL))
        return pl__err(PL_ECORRUPT, "schedule '%s': %s", name, pl_errmsg());
    return PL_OK;
}

static char *name_of(const pl__kvs *all, size_t i)
{
    return pl__strndup((const char *)pl__kvs_key(all, i), all->e[i].klen);
}

int pl_schedule_list(cJSON **out, pl_engine *e, int64_t now_ms)
{
    if (out)
        *out = NULL;
    if (!out || !e)
        return pl__err(PL_EINVAL, "pl_schedule_list: NULL %s",
                       !out ? "out" : "engine");
    if (now_ms < 0 || now_ms >= PL__CRON_TIME_MAX)
        return pl__err(PL_EINVAL,
                       "pl_schedule_list: now_ms %lld is not a time from "
                       "1970 to 9000",
                       (long long)now_ms);
    pl__kvs all = {0};
    int st = pl__store_scheds(e->store, &all);
    cJSON *list = st ? NULL : cJSON_CreateArray();
    if (!st && !list)
        st = pl__err(PL_ENOMEM, "out of memory");
    for (size_t i = 0; !st && i < all.n; i++) {
        char *name = name_of(&all, i);
        pl__sched_rec r;
        pl__cron c;
        pl__tz *z = NULL;
        if (!name) {
            st = pl__err(PL_ENOMEM, "out of memory");
            break;
        }
        if ((st = pl__sched_rec_decode(&r, name, pl__kvs_val(&all, i),
                                       all.e[i].vlen))) {
            free(name);
            break;
        }
        st = prepare(name, &r, &c, &z);
        cJSON *o = st ? NULL : cJSON_CreateObject();
        cJSON *payload = st ? NULL : cJSON_Parse(r.payload);
        if (!st && (!o || !payload))
            st = pl__err(PL_ECORRUPT,
                         "schedule '%s': its payload is not "
                         "JSON",
                         name);
        int64_t after = r.cursor_ms > now_ms ? r.cursor_ms : now_ms;
        if (!st &&
            (!cJSON_AddStringToObject(o, "name", name) ||
             !cJSON_AddStringToObject(o, "cron", r.cron) ||
             !cJSON_AddStringToObject(o, "zone", r.zone) ||
             !cJSON_AddStringToObject(o, "policy", r.policy) ||
             !cJSON_AddItemToObject(o, "payload", payload) ||
             !cJSON_AddStringToObject(o, "overlap", overlap_name(r.overlap)) ||
             !cJSON_AddStringToObject(o, "catch_up",
                                      catch_up_name(r.catch_up)) ||
             !cJSON_AddNumberToObject(o, "catch_up_max", r.catch_up_max) ||
             !cJSON_AddNumberToObject(o, "priority", r.priority) ||
             !cJSON_AddStringToObject(o, "concurrency_key",
                                      r.flow_key ? r.flow_key : "") ||
             !cJSON_AddNumberToObject(o, "concurrency_limit", r.flow_limit) ||
             !cJSON_AddNumberToObject(o, "deadline_in_ms",
                                      (double)r.deadline_in_ms) ||
             !cJSON_AddNumberToObject(o, "created_ms", (double)r.created_ms) ||
             !cJSON_AddNumberToObject(o, "cursor_ms", (double)r.cursor_ms) ||
             !cJSON_AddNumberToObject(o, "due_ms",
                                      (double)next_tick(&c, z, r.cursor_ms)) ||
             !cJSON_AddNumberToObject(o, "next_ms",
                                      (double)next_tick(&c, z, after)) ||
             !cJSON_AddStringToObject(o, "last_run", r.last_run))) {
            st = pl__err(PL_ENOMEM, "out of memory");
        }
        if (!st) {
            payload = NULL; /* the object's now */
            cJSON_AddItemToArray(list, o);
            o = NULL;
        }
        if (payload && (!o || !cJSON_GetObjectItemCaseSensitive(o, "payload")))
            cJSON_Delete(payload);
        cJSON_Delete(o);
        pl__tz_free(z);
        pl__sched_rec_clear(&r);
        free(name);
    }
    pl__kvs_free(&all);
    if (st) {
        cJSON_Delete(list);
        return st;
    }
    *out = list;
    return PL_OK;
}

/* ---- firing --------------------------------------------------------------- */

/* "<name>@<tick>", the tick in UTC to the minute: 2026-11-28T02:00Z. */
static void tick_id(char out[PL_MAX_RUN_ID + 1], const char *name,
                    int64_t tick_ms)
{
    int64_t secs = tick_ms / 1000, y;
    unsigned mo, d;
    pl__civil_from_days(secs / 86400, &y, &mo, &d);
    int64_t rem = secs % 86400;
    snprintf(out, PL_MAX_RUN_ID + 1, "%s@%04lld-%02u-%02uT%02d:%02dZ", name,
             (long long)y, mo, d, (int)(rem / 3600), (int)(rem / 60 % 60));
}

/* Is run @p id live: submitted, running, suspended or waiting (not
 * completed, failed or cancelled)?  A run continued as new
 * (pl_ctx_continue_as_new()) or superseded by an upgrade (pl_run_upgrade())
 * is final and live while its chain goes on: the answer is its
 * successor's, also once the continued run is deleted (while its
 * tombstone lasts; a deleted superseded run names no successor). */
static bool live(pl_engine *e, const char *id)
{
    char at[PL_MAX_RUN_ID + 1];
    snprintf(at, sizeof at, "%s", id);
    bool alive = false, next = true;
    for (unsigned hops = 0; next && hops < 1000000; hops++) {
        uint64_t num;
        pl__buf state = {0};
        pl__run_state rs;
        next = false;
        if (!*at)
            return false;
        if (pl__store_run_find(e->store, at, &num, NULL)) {
            /* deleted after it continued as new: its successor's answer */
            char succ[PL_MAX_RUN_ID + 1];
            next = !pl__chain_next_deleted(e, at, succ);
            pl__err_clear();
            if (!next)
                return false;
            memcpy(at, succ, sizeof at);
            continue;
        }
        if (!pl__store_state_get(e->store, num, &state) &&
            !pl__run_state_decode(&rs, at, state.data, state.len)) {
            bool linked = rs.status == PL_RUN_CONTINUED ||
                          rs.status == PL_RUN_SUPERSEDED;
            alive = rs.status != PL_RUN_COMPLETED &&
                    rs.status != PL_RUN_FAILED &&
                    rs.status != PL_RUN_CANCELLED && !linked;
            if (linked && rs.succ) {
                snprintf(at, sizeof at, "%s", rs.succ);
                next = true;
            }
            pl__run_state_clear(&rs);
        }
        pl__buf_free(&state);
    }
    return alive;
}

/*
 * Fire the due ticks of one schedule (record @p bytes): its runs
 * submitted, its cursor moved.  *started counts the runs this call made;
 * *next the schedule's next tick after now.
 */
/* @p r's record with its cursor on @p cursor_ms naming @p last_run, into
 * @p out (emptied first). */
static int encode_at(pl__buf *out, const char *name, pl__sched_rec *r,
                     int64_t cursor_ms, char *last_run)
{
    int64_t keep_cursor = r->cursor_ms;
    char *keep_last = r->last_run;
    r->cursor_ms = cursor_ms;
    r->last_run = last_run;
    out->len = 0;
    int st = pl__sched_rec_encode(out, name, r);
    r->cursor_ms = keep_cursor;
    r->last_run = keep_last;
    return st;
}

typedef struct fired {
    size_t n;
    pl__schedule_run_fn fn; /* each run created, or NULL */
    void *user;
} fired;

static int fire_one(pl_engine *e, const char *name, const uint8_t *bytes,
                    size_t len, int64_t now_ms, fired *f, int64_t *next)
{
    pl__sched_rec r;
    pl__cron c;
    pl__tz *z = NULL;
    int st = pl__sched_rec_decode(&r, name, bytes, len);
    if (st)
        return st;
    if ((st = prepare(name, &r, &c, &z)))
        goto done;
    *next = next_tick(&c, z, r.cursor_ms > now_ms ? r.cursor_ms : now_ms);
    if (!pl_registry_find(e->reg, r.policy))
        goto done; /* a process that has the policy fires it */
    /* the due ticks: the last `keep` of them, and the last one */
    size_t keep = r.catch_up == PL_CATCH_UP_ALL ? r.catch_up_max : 1;
    int64_t *ring = calloc(keep, sizeof *ring), last = 0;
    if (!ring) {
        st = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    size_t n = due_ticks(&c, z, r.cursor_ms, now_ms, ring, keep, &last);
    if (!n) {
        free(ring);
        goto done;
    }
    size_t from = n > keep ? n - keep : 0;
    cJSON *payload = cJSON_Parse(r.payload);
    char id[PL_MAX_RUN_ID + 1];
    char *last_run = r.last_run;
    char fired_id[PL_MAX_RUN_ID + 1] = "";
    if (!payload)
        st = pl__err(PL_ECORRUPT, "schedule '%s': its payload is not JSON",
                     name);
    /* the record as this fire last wrote it (or read it): each write goes
     * over it only */
    pl__buf cur = {0}, rec = {0};
    if (!st)
        st = pl__buf_append(&cur, bytes, len);
    for (size_t k = from; !st && k < n; k++) {
        int64_t tick = ring[k % keep];
        if (r.catch_up == PL_CATCH_UP_SKIP && now_ms - tick >= GRACE_MS)
            continue; /* missed: skipped */
        if (r.overlap == PL_OVERLAP_SKIP && live(e, last_run))
            continue; /* the last run goes on: this tick is skipped */
        tick_id(id, name, tick);
        pl_action a = PL_ACTION_INIT;
        a.policy = r.policy;
        a.payload = payload;
        pl_run_options o = PL_RUN_OPTIONS_INIT;
        o.run_id = id;
        /* the schedule's options, its deadline counted from the tick */
        o.priority = r.priority;
        o.concurrency_key = r.flow_key;
        o.concurrency_limit = r.flow_limit;
        o.deadline_ms = !r.deadline_in_ms ? 0
                        : r.deadline_in_ms > PL__TIME_MAX_MS - tick
                            ? PL__TIME_MAX_MS /* the latest a run has */
                            : tick + r.deadline_in_ms;
        /* the run, and the cursor on its tick naming it, in one commit */
        if ((st = encode_at(&rec, name, &r, tick, id)))
            break;
        st = pl__run_submit_sched(e, &a, &o, name, &rec, &cur);
        if (st == PL_EEXIST)
            st = PL_OK; /* another process fired it first */
        else if (!st && ++f->n && f->fn)
            f->fn(id, f->user);
        if (!st) {
            memcpy(fired_id, id, sizeof id);
            last_run = fired_id;
            pl__buf was = cur;
            cur = rec;
            rec = was;
        }
    }
    cJSON_Delete(payload);
    free(ring);
    /* the cursor to the last tick, over the record read only: written
     * already when that tick started a run */
    if (!st && !(st = encode_at(&rec, name, &r, last, last_run)) &&
        (rec.len != cur.len || memcmp(rec.data, cur.data, rec.len) != 0))
        st = write_rec(e, name, &rec, &cur, false);
    if (!st)
        *next = next_tick(&c, z, now_ms);
    pl__buf_free(&rec);
    pl__buf_free(&cur);
done:
    pl__tz_free(z);
    pl__sched_rec_clear(&r);
    return st;
}

/* fire_one(), again over the record as it is now while a tick's run found
 * the schedule changed since it was read (PL_EBUSY: a put, or another
 * process's fire, went first; nothing of that commit was written).  A
 * schedule deleted meanwhile fires no more. */
static int fire_fresh(pl_engine *e, const char *name, const uint8_t *bytes,
                      size_t len, int64_t now_ms, fired *f, int64_t *next)
{
    int st = fire_one(e, name, bytes, len, now_ms, f, next);
    for (unsigned tries = 1; st == PL_EBUSY && tries < PUT_TRIES; tries++) {
        pl__kvs all = {0};
        st = pl__store_scheds(e->store, &all);
        ptrdiff_t at = st ? -1 : find(&all, name);
        if (!st && at >= 0)
            st = fire_one(e, name, pl__kvs_val(&all, at), all.e[at].vlen,
                          now_ms, f, next);
        pl__kvs_free(&all);
    }
    return st;
}

int pl__schedule_fire(pl_engine *e, int64_t now_ms, pl__schedule_run_fn fn,
                      void *user, size_t *started, int64_t *next_ms,
                      char *failed)
{
    if (failed)
        *failed = '\0';
    if (started)
        *started = 0;
    if (next_ms)
        *next_ms = 0;
    if (!e)
        return pl__err(PL_EINVAL, "pl_schedule_fire: NULL engine");
    if (now_ms < 0 || now_ms >= PL__CRON_TIME_MAX)
        return pl__err(PL_EINVAL,
                       "pl_schedule_fire: now_ms %lld is not a time from "
                       "1970 to 9000",
                       (long long)now_ms);
    int rst = pl__engine_writable(e, "pl_schedule_fire");
    if (rst)
        return rst;
    pl__kvs all = {0};
    int st = pl__store_scheds(e->store, &all), first = PL_OK;
    char msg[PL__ERRMSG_MAX] = "";
    fired f = {0, fn, user};
    int64_t soonest = 0;
    for (size_t i = 0; !st && i < all.n; i++) {
        char *name = name_of(&all, i);
        if (!name) {
            st = pl__err(PL_ENOMEM, "out of memory");
            break;
        }
        int64_t next = 0;
        /* one schedule's failure (a damaged record) stops no other */
        int one = fire_fresh(e, name, pl__kvs_val(&all, i), all.e[i].vlen,
                             now_ms, &f, &next);
        if (one && !first) {
            /* named, as a worker's event and pl_engine_wake() say it */
            char prefix[PL_MAX_NAME + 16];
            snprintf(prefix, sizeof prefix, "schedule '%s'", name);
            pl__errmsg_save(msg);
            first = strncmp(msg, prefix, strlen(prefix))
                        ? pl__err(one, "%s: %s", prefix, msg)
                        : one;
            pl__errmsg_save(msg);
            if (failed)
                snprintf(failed, PL_MAX_NAME + 1, "%s", name);
        }
        if (next && (!soonest || next < soonest))
            soonest = next;
        free(name);
    }
    pl__kvs_free(&all);
    if (started)
        *started = f.n;
    if (next_ms)
        *next_ms = soonest;
    if (!st && first) {
        pl__errmsg_restore(msg);
        st = first;
    }
    return st;
}

int pl_schedule_fire(pl_engine *e, int64_t now_ms, size_t *started,
                     int64_t *next_ms)
{
    return pl__schedule_fire(e, now_ms, NULL, NULL, started, next_ms, NULL);
}

/* pl_engine_wake()'s part: the runs the due ticks start, executed here. */
typedef struct woken {
    char **ids;
    size_t n, cap;
    bool oom;
} woken;

static void keep_id(const char *id, void *user)
{
    woken *w = user;
    char **g = pl__grow(w->ids, &w->cap, w->n, sizeof *g, 8);
    char *copy = g ? pl__strdup(id) : NULL;
    if (!copy) {
        w->oom = true; /* a worker, or pl_run_continue(), runs it later */
        if (g)
            w->ids = g;
        return;
    }
    w->ids = g;
    w->ids[w->n++] = copy;
}

int pl__schedules_wake(pl_engine *e, int64_t *next_ms, char *failed,
                       char *failed_run)
{
    woken w = {0};
    if (failed_run)
        *failed_run = '\0';
    int st = pl__schedule_fire(e, pl__now_us() / 1000, keep_id, &w, NULL,
                               next_ms, failed);
    for (size_t i = 0; i < w.n; i++) {
        pl_outcome *o = NULL;
        int one = pl_run_continue(&o, e, w.ids[i], NULL);
        pl_outcome_free(o);
        /* taken by a worker meanwhile: it goes on there (a failure the
         * run records is an outcome, PL_OK).  Else the run its tick
         * started could not be executed here (cancelled meanwhile, say):
         * a failure of its schedule, named as a failed firing is, the run
         * too; its schedule's name is the id's up to its '@' (tick_id()) */
        if (one && !st && one != PL_EBUSY) {
            char msg[PL__ERRMSG_MAX];
            int n = (int)strcspn(w.ids[i], "@");
            pl__errmsg_save(msg);
            st = pl__err(one, "schedule '%.*s': %s", n, w.ids[i], msg);
            if (failed)
                snprintf(failed, PL_MAX_NAME + 1, "%.*s", n, w.ids[i]);
            if (failed_run)
                snprintf(failed_run, PL_MAX_RUN_ID + 1, "%s", w.ids[i]);
        }
        free(w.ids[i]);
    }
    free(w.ids);
    return st;
}

int pl_cron_next(int64_t *out_ms, const char *cron, const char *zone,
                 int64_t after_ms)
{
    if (!out_ms)
        return pl__err(PL_EINVAL, "pl_cron_next: out_ms is NULL");
    int st = pl__cron_next_fire(out_ms, cron, zone, after_ms);
    if (st)
        *out_ms = 0;
    return st;
}
