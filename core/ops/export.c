/*
 * export.c -- pl_run_export and pl_run_export_each: a run as JSON lines, in
 * the format export.h describes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "export.h"
#include "internal.h"
#include "path.h"
#include "run.h"

static const char hexd[] = "0123456789abcdef";

static char *hex_new(const uint8_t *p, size_t n)
{
    char *s = malloc(2 * n + 1);
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = hexd[p[i] >> 4];
        s[2 * i + 1] = hexd[p[i] & 15];
    }
    s[2 * n] = '\0';
    return s;
}

/* "2026-11-24T15:04:05.123456Z" (proleptic Gregorian, UTC). */
void pl__export_time_iso(char *out, size_t n, int64_t us)
{
    int64_t secs = us / 1000000, frac = us % 1000000;
    if (frac < 0) {
        frac += 1000000;
        secs--;
    }
    int64_t days = secs / 86400, rem = secs % 86400;
    if (rem < 0) {
        rem += 86400;
        days--;
    }
    /* days to civil (H. Hinnant's algorithm) */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = yoe + era * 400;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;
    if (m <= 2)
        y++;
    snprintf(out, n, "%04lld-%02lld-%02lldT%02lld:%02lld:%02lld.%06lldZ",
             (long long)y, (long long)m, (long long)d, (long long)(rem / 3600),
             (long long)(rem / 60 % 60), (long long)(rem % 60),
             (long long)frac);
}

static bool add_hex(cJSON *o, const char *name, const uint8_t *p, size_t n)
{
    char *h = hex_new(p, n);
    bool ok = h && cJSON_AddStringToObject(o, name, h);
    free(h);
    return ok;
}

/* Write @p o as one line.  PL_ENOMEM or PL_EIO.  A string the store keeps
 * need not be UTF-8 (cJSON keeps any bytes), but JSON text is: a byte that
 * is not is written as U+FFFD, which the import takes for it. */
static int put_line(FILE *out, const cJSON *o)
{
    char *raw = cJSON_PrintUnformatted(o);
    char *text = raw ? pl__utf8_fixed(raw) : NULL;
    free(raw);
    if (!text)
        return pl__err(PL_ENOMEM, "out of memory");
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, out) == n && fputc('\n', out) != EOF;
    free(text);
    return ok ? PL_OK
              : pl__err(PL_EIO, "pl_run_export: writing the export failed");
}

/* A copy of @p j with each string and member name as pl__utf8_fixed()
 * makes it; NULL on OOM. */
static cJSON *utf8_copy(const cJSON *j)
{
    if (cJSON_IsString(j)) {
        char *t = pl__utf8_fixed(j->valuestring);
        cJSON *c = t ? cJSON_CreateString(t) : NULL;
        free(t);
        return c;
    }
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j))
        return cJSON_Duplicate(j, 0);
    cJSON *c = cJSON_IsObject(j) ? cJSON_CreateObject() : cJSON_CreateArray();
    const cJSON *m;
    cJSON_ArrayForEach(m, j)
    {
        cJSON *v = c ? utf8_copy(m) : NULL;
        char *k = v && m->string ? pl__utf8_fixed(m->string) : NULL;
        bool ok = v && (cJSON_IsObject(j) ? k && cJSON_AddItemToObject(c, k, v)
                                          : cJSON_AddItemToArray(c, v));
        free(k);
        if (!ok) {
            cJSON_Delete(v);
            cJSON_Delete(c);
            return NULL;
        }
    }
    return c;
}

/* Does a line's JSON @p theirs say the record's @p mine?  The export
 * prints a byte that is not UTF-8 as U+FFFD (JSON text is UTF-8), so the
 * two are compared as it prints them.  OOM compares unequal. */
bool pl__export_same_json(const cJSON *mine, const cJSON *theirs)
{
    if (!mine || !theirs || cJSON_Compare(mine, theirs, 1))
        return mine && theirs;
    cJSON *a = utf8_copy(mine), *b = utf8_copy(theirs);
    bool same = a && b && cJSON_Compare(a, b, 1);
    cJSON_Delete(a);
    cJSON_Delete(b);
    return same;
}

/* The same for the record's text @p mine of @p n bytes. */
bool pl__export_same_text(const char *mine, size_t n, const char *theirs)
{
    if (!theirs)
        return false;
    if (strlen(theirs) == n && !memcmp(mine, theirs, n))
        return true;
    char *m = pl__strndup(mine, n);
    char *a = m ? pl__utf8_fixed(m) : NULL, *b = pl__utf8_fixed(theirs);
    bool same = a && b && !strcmp(a, b);
    free(m);
    free(a);
    free(b);
    return same;
}

/* ---- export ----------------------------------------------------------------------- */

static int give(pl_export_fn fn, void *user, cJSON *line)
{
    int rc = fn(line, user);
    if (!rc)
        return PL_OK;
    if (pl__status_failure(rc))
        return pl__err(rc, "pl_run_export: the line visitor stopped: %s",
                       pl_strerror(rc));
    return pl__err(PL_EINVAL, "pl_run_export: the line visitor stopped (%d)",
                   rc);
}

static int collect_rec(const uint8_t *key, size_t klen, const uint8_t *val,
                       size_t vlen, void *user)
{
    return pl__kvs_add(user, key, klen, val, vlen);
}

typedef struct export_ctx {
    const char *id;
    pl_export_fn fn;
    void *user;
    const pl__kvs *recs;
    size_t next; /* the stored record the walk reaches next */
    int st;
} export_ctx;

static int export_step(const pl_step *s, void *user)
{
    export_ctx *x = user;
    const char *id = pl_step_id(s);
    const char *colon = strrchr(id, ':');
    char path[PL__PATH_MAX], t[48];
    uint8_t h[PL_HASH_LEN], prev[PL_HASH_LEN];
    size_t plen = colon ? (size_t)(colon - id) : 0;
    if (!colon || plen >= sizeof path) {
        x->st = pl__err(PL_ECORRUPT, "run '%s': bad step id '%s'", x->id, id);
        return 1;
    }
    memcpy(path, id, plen);
    path[plen] = '\0';
    bool stored = pl_step_hash(h, s) == PL_OK;
    if (pl_step_prev_hash(prev, s))
        memset(prev, 0, sizeof prev);
    pl__export_time_iso(t, sizeof t, pl_step_time_us(s));
    cJSON *o = cJSON_CreateObject();
    const cJSON *p = pl_step_payload(s);
    bool ok = o && cJSON_AddStringToObject(o, "run", x->id) &&
              cJSON_AddStringToObject(o, "path", path) &&
              cJSON_AddNumberToObject(o, "seq", pl_step_seq(s)) &&
              cJSON_AddStringToObject(o, "id", id) &&
              cJSON_AddStringToObject(o, "actor", pl_step_actor(s)) &&
              cJSON_AddStringToObject(o, "type",
                                      pl_step_type_name(pl_step_type_of(s))) &&
              /* CS: the name is not copied, so adding cannot fail and
               * leave the copy unowned */
              p &&
              cJSON_AddItemToObjectCS(o, "payload", cJSON_Duplicate(p, 1)) &&
              cJSON_AddStringToObject(o, "time", t) &&
              cJSON_AddNumberToObject(o, "time_us",
                                      (double)pl_step_time_us(s)) &&
              (pl_step_code(s)
                   ? cJSON_AddStringToObject(o, "code", pl_step_code(s)) != NULL
                   : cJSON_AddNullToObject(o, "code") != NULL) &&
              (stored ? add_hex(o, "hash", h, PL_HASH_LEN)
                      : cJSON_AddNullToObject(o, "hash") != NULL) &&
              add_hex(o, "prev_hash", prev, PL_HASH_LEN);
    if (ok && stored) {
        /* the walk and the records are both in key order */
        const pl__kvs *r = x->recs;
        uint64_t run;
        uint32_t comps[PL_MAX_DEPTH], seq;
        unsigned depth;
        char kpath[PL__PATH_MAX];
        if (x->next >= r->n ||
            !pl__key_parse(pl__kvs_key(r, x->next), r->e[x->next].klen, &run,
                           comps, &depth, &seq) ||
            (pl__path_format(kpath, comps, depth), strcmp(kpath, path)) ||
            seq != pl_step_seq(s)) {
            cJSON_Delete(o);
            x->st = pl__err(PL_EBUSY,
                            "pl_run_export: run '%s' changed while it was "
                            "being read (at step %s): export it once it stops",
                            x->id, id);
            return 1;
        }
        ok = add_hex(o, "record", pl__kvs_val(r, x->next), r->e[x->next].vlen);
        x->next++;
    } else if (ok) {
        ok = cJSON_AddTrueToObject(o, "derived") != NULL;
    }
    if (!ok) {
        cJSON_Delete(o);
        x->st = pl__err(PL_ENOMEM, "out of memory");
        return 1;
    }
    x->st = give(x->fn, x->user, o);
    cJSON_Delete(o);
    return x->st ? 1 : 0;
}

/* The inbox line of record @p i of @p ib (export.h). */
static int inbox_line(cJSON **out, const char *id, const pl__kvs *ib, size_t i)
{
    pl__inbox_rec r = {0};
    cJSON *o = NULL, *payload = NULL;
    int st = ib->e[i].klen != 8
                 ? pl__err(PL_ECORRUPT, "an inbox key is malformed")
                 : pl__inbox_decode(&r, id, pl__kvs_val(ib, i), ib->e[i].vlen);
    if (!st && r.name)
        st = pl__payload_decode(&payload, r.payload, r.payload_len);
    if (st) {
        pl__inbox_clear(&r);
        return pl__err(st, "pl_run_export: run '%s': an inbox record: %s", id,
                       pl_errmsg());
    }
    bool ok = (o = cJSON_CreateObject()) &&
              cJSON_AddStringToObject(o, "kind", "inbox") &&
              cJSON_AddStringToObject(o, "run", id) &&
              cJSON_AddNumberToObject(o, "seq",
                                      (double)pl__get_be64(pl__kvs_key(ib,
                                                                       i))) &&
              (r.name ? cJSON_AddStringToObject(o, "name", r.name) &&
                            cJSON_AddItemToObject(o, "payload", payload)
                      : cJSON_AddStringToObject(o, "reason", r.reason) != NULL);
    if (ok)
        payload = NULL; /* o's */
    ok = ok && cJSON_AddNumberToObject(o, "sent_us", (double)r.sent_us) &&
         add_hex(o, "record", pl__kvs_val(ib, i), ib->e[i].vlen);
    pl__inbox_clear(&r);
    cJSON_Delete(payload);
    if (!ok) {
        cJSON_Delete(o);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    *out = o;
    return PL_OK;
}

static cJSON *run_line(const char *id, uint64_t num, const pl__run_info *ri,
                       const pl__run_state *rs, size_t records, size_t inbox,
                       const pl__buf *info, const pl__buf *state)
{
    cJSON *o = cJSON_CreateObject(), *payload = NULL;
    if (!o || pl__payload_decode(&payload, ri->payload, ri->payload_len)) {
        cJSON_Delete(o);
        return NULL;
    }
    bool ok = cJSON_AddStringToObject(o, "kind", "run") &&
              cJSON_AddNumberToObject(o, "format", PL__EXPORT_FORMAT) &&
              cJSON_AddStringToObject(o, "run", id) &&
              cJSON_AddNumberToObject(o, "run_number", (double)num) &&
              cJSON_AddStringToObject(o, "policy", ri->policy) &&
              cJSON_AddItemToObject(o, "payload", payload);
    if (!ok)
        cJSON_Delete(payload);
    ok = ok &&
         cJSON_AddStringToObject(o, "status", pl_run_status_name(rs->status)) &&
         cJSON_AddNumberToObject(o, "created_us", (double)ri->created_us) &&
         cJSON_AddNumberToObject(o, "updated_us", (double)rs->updated_us) &&
         cJSON_AddNumberToObject(o, "steps", (double)rs->steps) &&
         cJSON_AddNumberToObject(o, "records", (double)records) &&
         (rs->has_head ? add_hex(o, "head", rs->head, PL_HASH_LEN)
                       : cJSON_AddNullToObject(o, "head") != NULL) &&
         (ri->code ? cJSON_AddStringToObject(o, "code", ri->code) != NULL
                   : cJSON_AddNullToObject(o, "code") != NULL) &&
         add_hex(o, "info", info->data, info->len) &&
         add_hex(o, "state", state->data, state->len) &&
         cJSON_AddNumberToObject(o, "inbox", (double)inbox);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int pl_run_export_each(pl_engine *e, const char *run_id, pl_export_fn fn,
                       void *user)
{
    if (!e || !fn || !pl__run_id_ok(run_id))
        return pl__err(PL_EINVAL, "pl_run_export: an engine, a valid run id "
                                  "and a visitor are required");
    uint64_t num;
    pl__buf info = {0}, sb = {0};
    pl__run_info ri = {0};
    pl__run_state rs = {0};
    pl__kvs recs = {0}, ib = {0};
    cJSON *line = NULL;
    int st;
    if ((st = pl__store_settle(e->store)) ||
        (st = pl__store_run_find(e->store, run_id, &num, &info)) ||
        (st = pl__store_state_get(e->store, num, &sb)) ||
        (st = pl__run_state_decode(&rs, run_id, sb.data, sb.len)) ||
        (st = pl__run_info_decode(&ri, run_id, info.data, info.len)) ||
        (st = pl__store_each_step(e->store, num, collect_rec, &recs)) ||
        (st = pl__store_inbox_read(e->store, num, &ib))) {
        st = pl__err(st, "pl_run_export: run '%s': %s", run_id, pl_errmsg());
        goto done;
    }
    if (!(line = run_line(run_id, num, &ri, &rs, recs.n, ib.n, &info, &sb))) {
        st = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    if ((st = give(fn, user, line)))
        goto done;
    export_ctx x = {run_id, fn, user, &recs, 0, PL_OK};
    st = pl_run_walk(e, run_id, export_step, &x);
    if (x.st)
        st = x.st;
    else if (!st && x.next != recs.n)
        st = pl__err(PL_EBUSY,
                     "pl_run_export: run '%s' changed while it was "
                     "being read: export it once it stops",
                     run_id);
    for (size_t i = 0; !st && i < ib.n; i++) {
        cJSON_Delete(line);
        line = NULL;
        if (!(st = inbox_line(&line, run_id, &ib, i)))
            st = give(fn, user, line);
    }
done:
    cJSON_Delete(line);
    pl__kvs_free(&recs);
    pl__kvs_free(&ib);
    pl__run_info_clear(&ri);
    pl__run_state_clear(&rs);
    pl__buf_free(&info);
    pl__buf_free(&sb);
    return st;
}

/* cJSON prints a number of 16 digits in exponent form when that reads back
 * the same (1.7959603720989e+15), which JSON readers take for a float: the
 * times in microseconds ("..._us") are written as their digits. */
static int put_visit(cJSON *line, void *user)
{
    for (cJSON *m = line->child, *next; m; m = next) {
        next = m->next;
        size_t n = m->string ? strlen(m->string) : 0;
        /* a time out of int64's range (a damaged record) stays a number:
         * its cast would be undefined */
        if (!cJSON_IsNumber(m) || n < 4 || strcmp(m->string + n - 3, "_us") ||
            !(m->valuedouble >= -9.2e18 && m->valuedouble <= 9.2e18))
            continue;
        char digits[24];
        snprintf(digits, sizeof digits, "%lld", (long long)m->valuedouble);
        cJSON *raw = cJSON_CreateRaw(digits);
        if (!raw ||
            !cJSON_ReplaceItemInObjectCaseSensitive(line, m->string, raw)) {
            cJSON_Delete(raw);
            return pl__err(PL_ENOMEM, "out of memory");
        }
    }
    return put_line(user, line);
}

int pl_run_export(pl_engine *e, const char *run_id, FILE *out)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_run_export: the stream is NULL");
    int st = pl_run_export_each(e, run_id, put_visit, out);
    if (!st && fflush(out))
        st = pl__err(PL_EIO, "pl_run_export: writing the export failed");
    return st;
}
