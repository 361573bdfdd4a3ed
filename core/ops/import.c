/*
 * import.c -- pl_run_import: a run exported as JSON lines (export.h) back
 * into a store.
 *
 * THE IMPORT checks everything before it writes anything.  Each record is
 * hashed with its SOURCE key (run_number, path, seq) and compared with the
 * line's hash; then the records are re-chained under the source number and
 * id (rechain.c), which gives an intact export back byte for byte: a
 * previous-step hash or an action_result link that differs names the step
 * where the chain breaks.  Only then is the run written, re-chained under
 * the number the store gives it and its (maybe new) id, as a fork is.
 *
 * The store numbers a run when it creates it, and the keys (so the hashes)
 * need that number, so writing takes two commits: the run is created
 * `failed`, with a reason saying the import did not complete, and the
 * second commit writes its steps and its exported state.  A process that
 * dies between the two leaves that failed run (its id taken); nothing else
 * does.  A refused import writes nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "claim.h"
#include "export.h"
#include "internal.h"
#include "path.h"
#include "rechain.h"
#include "retention.h"
#include "run.h"

/* The longest line an import reads: a step's record (hex) and its payload
 * (JSON) are both bounded by the payload limits, far below this. */
#define LINE_MAX_BYTES ((size_t)64 << 20)

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decode lowercase hex into @p out (appended).  false: not hex. */
static bool hex_decode(pl__buf *out, const char *s, int *oom)
{
    size_t n = strlen(s);
    if (n % 2)
        return false;
    if (pl__buf_reserve(out, n / 2)) {
        *oom = 1;
        return false;
    }
    for (size_t i = 0; i < n; i += 2) {
        int a = hex_val(s[i]), b = hex_val(s[i + 1]);
        if (a < 0 || b < 0)
            return false;
        out->data[out->len++] = (uint8_t)(a << 4 | b);
    }
    return true;
}

/* ---- import: reading -------------------------------------------------------------- */

typedef struct reader {
    FILE *in;
    pl__buf line;
    unsigned long no; /* the line just read, from 1 */
    bool eof;
} reader;

/* Read the next line into r->line (NUL-terminated, without its '\n').
 * PL_OK with r->eof at the end; PL_ELIMIT; PL_EJSON for a line cut short;
 * PL_EIO. */
static int read_line(reader *r)
{
    pl__buf_reset(&r->line);
    r->no++;
    int c;
    while ((c = getc(r->in)) != EOF && c != '\n') {
        if (r->line.len >= LINE_MAX_BYTES)
            return pl__err(PL_ELIMIT, "line %lu: longer than %zu bytes", r->no,
                           LINE_MAX_BYTES);
        /* at once: a stream of zeros (/dev/zero) is refused at its first
         * byte, not after 64 MiB read */
        if (!c)
            return pl__err(PL_EJSON, "line %lu: holds a NUL byte", r->no);
        uint8_t b = (uint8_t)c;
        if (pl__buf_append(&r->line, &b, 1))
            return pl__err(PL_ENOMEM, "out of memory");
    }
    if (c == EOF) {
        if (ferror(r->in))
            return pl__err(PL_EIO, "line %lu: reading the export failed",
                           r->no);
        if (!r->line.len) {
            r->eof = true;
            return PL_OK;
        }
        return pl__err(PL_EJSON,
                       "line %lu: the line has no end: the export is "
                       "truncated",
                       r->no);
    }
    if (pl__buf_append(&r->line, "", 1))
        return pl__err(PL_ENOMEM, "out of memory");
    r->line.len--;
    return PL_OK;
}

static int parse_line(cJSON **out, reader *r)
{
    /* a string cJSON would cut at a NUL is refused, naming it */
    int st = pl_json_parse(out, (const char *)r->line.data, r->line.len);
    if (st)
        return pl__err(st, "line %lu: %s", r->no, pl_errmsg());
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return pl__err(PL_EJSON, "line %lu: not a JSON object", r->no);
    }
    return PL_OK;
}

static const char *get_str(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* An integer field in [lo, hi] (within 2^53, where doubles are exact). */
static bool get_int(const cJSON *o, const char *name, int64_t lo, int64_t hi,
                    int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0))
        return false;
    int64_t i = (int64_t)d;
    if ((double)i != d || i < lo || i > hi)
        return false;
    *out = i;
    return true;
}

static int field_err(const reader *r, const char *name, const char *what)
{
    return pl__err(PL_EJSON, "line %lu: \"%s\" is missing or not %s", r->no,
                   name, what);
}

/* A hex field that decodes to exactly @p n bytes. */
static bool get_hash(const cJSON *o, const char *name, uint8_t out[PL_HASH_LEN])
{
    const char *s = get_str(o, name);
    pl__buf b = {0};
    int oom = 0;
    bool ok = s && strlen(s) == 2 * PL_HASH_LEN && hex_decode(&b, s, &oom);
    if (ok)
        memcpy(out, b.data, PL_HASH_LEN);
    pl__buf_free(&b);
    return ok;
}

/* ---- import: checking ------------------------------------------------------------- */

typedef struct import_ctx {
    reader rd;
    const char *src_id;
    uint64_t src_num;
    int64_t records;
    pl__kvs recs;    /* source key -> record, in key order */
    pl__kvs scratch; /* the check walk's copies */
    pl__rechain check;
    pl__hasher *hasher;
    pl__buf rec;
    /* a derived line waits for the action_result that folds it */
    bool pending;
    char pending_path[PL__PATH_MAX];
    char pending_name[PL__PATH_MAX + 16]; /* its step id */
    uint32_t pending_seq;
    pl_step_type pending_type;
    cJSON *pending_line; /* the derived line, checked with its folder */
    unsigned long pending_no;
    /* format 2: the inbox lines, after the steps */
    int64_t inbox_n; /* how many the run line says */
    pl__kvs inbox;   /* seq (u64 BE) -> record, bound to the source id */
} import_ctx;

static int refuse(const char *step, const char *what)
{
    return pl__err(PL_ECORRUPT, "step %s: %s: the export was changed", step,
                   what);
}

/* LMDB's key order: bytes, then length. */
static int key_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

/* Does the line's "time" say its "time_us"? */
static bool time_matches(const cJSON *o, int64_t us)
{
    const char *text = get_str(o, "time");
    char t[48];
    pl__export_time_iso(t, sizeof t, us);
    return text && !strcmp(text, t);
}

/*
 * A derived line is the callee's one step, folded into the result @p rec
 * holds: every field must be what the export makes of that record
 * (pl__step_folded()), or the line was edited.  Refusals name
 * the derived line.
 */
static int check_derived(import_ctx *x, const pl__rec *rec)
{
    const cJSON *o = x->pending_line;
    const char *sid = x->pending_name, *why = NULL;
    const char *actor = get_str(o, "actor"), *id = get_str(o, "id");
    const char *run = get_str(o, "run");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(o, "code");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(o, "hash");
    const cJSON *payload = cJSON_GetObjectItemCaseSensitive(o, "payload");
    uint8_t genesis[PL_HASH_LEN], prev[PL_HASH_LEN];
    int64_t t;
    int st = pl__genesis_hash(x->hasher, x->src_id, genesis);
    if (st)
        return st;
    if (!run || strcmp(run, x->src_id))
        why = "\"run\" is not the run of line 1";
    else if (!id || strcmp(id, sid))
        why = "\"id\" is not \"<path>:<seq>\"";
    else if (!actor || strlen(actor) != rec->actor_len ||
             memcmp(actor, rec->actor, rec->actor_len))
        why = "\"actor\" does not match the result that folds it";
    else if (!get_int(o, "time_us", INT64_MIN / 2, INT64_MAX / 2, &t) ||
             t != rec->time_us || !time_matches(o, t))
        why = "\"time_us\" or \"time\" does not match the result that folds "
              "it";
    else if (!cJSON_IsNull(code) || !cJSON_IsNull(hash))
        why = "\"code\" and \"hash\" of a derived step are null";
    else if (!get_hash(o, "prev_hash", prev) ||
             memcmp(prev, genesis, PL_HASH_LEN))
        why = "\"prev_hash\" is not the run's genesis hash";
    else if (!cJSON_IsObject(payload))
        why = "\"payload\" is not an object";
    if (!why && !rec->mirrored) {
        pl_step *s = NULL;
        if ((st = pl__step_folded(rec, genesis, x->pending_path, &s)))
            return pl__err(st, "step %s: %s", sid, pl_errmsg());
        const cJSON *mine = pl_step_payload(s);
        if (!pl__export_same_json(mine, payload))
            why = "\"payload\" does not match the result that folds it";
        pl_step_free(s);
    }
    if (why)
        return pl__err(PL_ECORRUPT,
                       "line %lu: step %s: %s: the export was changed",
                       x->pending_no, sid, why);
    return PL_OK;
}

/* Do a step line's human fields say what its record says? */
static int check_fields(import_ctx *x, const cJSON *o, const char *sid,
                        const char *path, const pl__rec *rec)
{
    pl_step_type type;
    int64_t t;
    const char *actor = get_str(o, "actor"), *tname = get_str(o, "type");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(o, "code");
    uint8_t prev[PL_HASH_LEN];
    if (!tname || pl_step_type_parse(&type, tname))
        return field_err(&x->rd, "type", "a step type");
    if (!actor)
        return field_err(&x->rd, "actor", "a string");
    if (!get_int(o, "time_us", INT64_MIN / 2, INT64_MAX / 2, &t))
        return field_err(&x->rd, "time_us", "an integer");
    if (!cJSON_IsNull(code) && !cJSON_IsString(code))
        return field_err(&x->rd, "code", "a string or null");
    if (!get_hash(o, "prev_hash", prev))
        return field_err(&x->rd, "prev_hash", "a hex hash");
    if (type != rec->type)
        return refuse(sid, "\"type\" does not match its record");
    if (strlen(actor) != rec->actor_len ||
        memcmp(actor, rec->actor, rec->actor_len))
        return refuse(sid, "\"actor\" does not match its record");
    if (t != rec->time_us)
        return refuse(sid, "\"time_us\" does not match its record");
    if (!time_matches(o, t))
        return refuse(sid, "\"time\" does not match its record");
    if (cJSON_IsNull(code) != !rec->code ||
        (rec->code &&
         !pl__export_same_text(rec->code, rec->code_len, code->valuestring)))
        return refuse(sid, "\"code\" does not match its record");
    if (memcmp(prev, rec->prev_hash, PL_HASH_LEN))
        return refuse(sid, "\"prev_hash\" does not match its record");
    const cJSON *payload = cJSON_GetObjectItemCaseSensitive(o, "payload");
    if (!cJSON_IsObject(payload))
        return field_err(&x->rd, "payload", "an object");
    if (rec->mirrored)
        return PL_OK; /* its caller's result's, checked with that */
    pl_step *s = NULL;
    int st = pl__step_from_rec(rec, path, &s);
    if (st)
        return pl__err(st, "step %s: %s", sid, pl_errmsg());
    const cJSON *mine = pl_step_payload(s);
    bool same = pl__export_same_json(mine, payload);
    pl_step_free(s);
    return same ? PL_OK : refuse(sid, "\"payload\" does not match its record");
}

/* Check one step line with a record and keep the record. */
static int take_step(import_ctx *x, const cJSON *o)
{
    const char *path = get_str(o, "path"), *id = get_str(o, "id");
    const char *run = get_str(o, "run");
    const char *hex = get_str(o, "record");
    int64_t seq;
    uint32_t comps[PL_MAX_DEPTH];
    unsigned depth;
    uint8_t hash[PL_HASH_LEN], mine[PL_HASH_LEN];
    char sid[PL__PATH_MAX + 16];
    int st;
    if (!run || strcmp(run, x->src_id))
        return pl__err(PL_EJSON, "line %lu: \"run\" is not the run of line 1",
                       x->rd.no);
    if (!path || pl__path_parse(path, comps, &depth))
        return field_err(&x->rd, "path", "an invocation path");
    if (!get_int(o, "seq", 0, UINT32_MAX - 1, &seq))
        return field_err(&x->rd, "seq", "a step number");
    snprintf(sid, sizeof sid, "%s:%u", path, (unsigned)seq);
    if (!id || strcmp(id, sid))
        return field_err(&x->rd, "id", "\"<path>:<seq>\"");
    if (!hex)
        return field_err(&x->rd, "record", "a hex string");
    if (!get_hash(o, "hash", hash))
        return field_err(&x->rd, "hash", "a hex hash");
    pl__buf_reset(&x->rec);
    int oom = 0;
    if (!hex_decode(&x->rec, hex, &oom))
        return oom ? pl__err(PL_ENOMEM, "out of memory")
                   : pl__err(PL_EJSON,
                             "line %lu: step %s: \"record\" is not hex",
                             x->rd.no, sid);

    uint8_t key[PL__KEY_MAX];
    size_t klen = pl__ledger_prefix(key, x->src_num, comps, depth);
    pl__put_be32(key + klen, (uint32_t)seq);
    klen += 4;
    if (x->recs.n) {
        size_t last = x->recs.n - 1;
        int c = key_cmp(key, klen, pl__kvs_key(&x->recs, last),
                        x->recs.e[last].klen);
        if (c == 0)
            return pl__err(PL_ECORRUPT,
                           "line %lu: step %s: a duplicate of the step before "
                           "it: the export was changed",
                           x->rd.no, sid);
        if (c < 0)
            return pl__err(PL_ECORRUPT,
                           "line %lu: step %s: out of order (steps come in "
                           "key order): the export was changed",
                           x->rd.no, sid);
    }
    if (x->records >= 0 && (int64_t)x->recs.n >= x->records)
        return pl__err(PL_ECORRUPT,
                       "line %lu: step %s: more steps than line 1's "
                       "\"records\" (%lld): the export was changed",
                       x->rd.no, sid, (long long)x->records);

    pl__rec rec;
    if ((st = pl__rec_decode_lazy(&rec, x->rec.data, x->rec.len)) ||
        (!rec.mirrored && (st = pl__rec_check(&rec))))
        return pl__err(PL_ECORRUPT,
                       "step %s: its record does not decode (%s): the "
                       "export was changed",
                       sid, pl_errmsg());
    if (rec.seq != (uint32_t)seq)
        return refuse(sid, "its record is of another step");
    if ((st = pl__step_hash(x->hasher, key, klen, x->rec.data, x->rec.len,
                            mine)))
        return st;
    if (memcmp(mine, hash, PL_HASH_LEN))
        return refuse(sid, "hash does not match its record");
    if ((st = check_fields(x, o, sid, path, &rec)))
        return st;
    if (x->pending) {
        char want[PL__PATH_MAX + 16];
        snprintf(want, sizeof want, "%s.%u", path, rec.link_seq);
        if (!rec.has_link || !rec.link_folded ||
            strcmp(want, x->pending_path) || x->pending_seq != 0 ||
            rec.link_type != x->pending_type)
            return refuse(x->pending_name,
                          "a derived step that its next step does not fold");
        if ((st = check_derived(x, &rec)))
            return st;
        x->pending = false;
    } else if (rec.has_link && rec.link_folded) {
        return refuse(sid, "the folded step before it is missing");
    }

    /* the chain, under the source number and id: an intact export comes
     * back byte for byte */
    pl__kvs_reset(&x->scratch);
    if ((st = pl__rechain_step(&x->check, x->src_num, key, klen, x->rec.data,
                               x->rec.len, &x->scratch, mine)))
        return pl__err(st, "step %s: %s", sid, pl_errmsg());
    const uint8_t *again = pl__kvs_val(&x->scratch, 0);
    size_t prev_at = (size_t)(rec.prev_hash - x->rec.data);
    if (memcmp(again + prev_at, rec.prev_hash, PL_HASH_LEN))
        return refuse(sid, seq ? "its previous-step hash does not match the "
                                 "step before it (a step is missing, moved "
                                 "or changed)"
                               : "its previous-step hash is not the run's "
                                 "genesis hash");
    if (rec.link_hash && memcmp(again + (rec.link_hash - x->rec.data),
                                rec.link_hash, PL_HASH_LEN)) {
        char callee[PL__PATH_MAX + 16];
        snprintf(callee, sizeof callee, "%s.%u", path, rec.link_seq);
        return pl__err(PL_ECORRUPT,
                       "step %s: its link does not match the last step of "
                       "ledger %s (a step is missing or changed): the export "
                       "was changed",
                       sid, callee);
    }
    return pl__kvs_add(&x->recs, key, klen, x->rec.data, x->rec.len);
}

/* A derived line: a folded callee's step, checked with its caller's
 * result. */
static int take_derived(import_ctx *x, const cJSON *o)
{
    const char *path = get_str(o, "path"), *tname = get_str(o, "type");
    int64_t seq;
    uint32_t comps[PL_MAX_DEPTH];
    unsigned depth;
    if (x->pending)
        return refuse(x->pending_name,
                      "a derived step that its next step does not fold");
    if (!path || pl__path_parse(path, comps, &depth) || !depth ||
        strlen(path) >= sizeof x->pending_path)
        return field_err(&x->rd, "path", "a callee's invocation path");
    if (!get_int(o, "seq", 0, UINT32_MAX - 1, &seq))
        return field_err(&x->rd, "seq", "a step number");
    if (!tname || pl_step_type_parse(&x->pending_type, tname))
        return field_err(&x->rd, "type", "a step type");
    if (cJSON_GetObjectItemCaseSensitive(o, "record"))
        return pl__err(PL_EJSON, "line %lu: a derived step has no \"record\"",
                       x->rd.no);
    memcpy(x->pending_path, path, strlen(path) + 1);
    snprintf(x->pending_name, sizeof x->pending_name, "%s:%u", path,
             (unsigned)seq);
    x->pending_seq = (uint32_t)seq;
    cJSON_Delete(x->pending_line);
    if (!(x->pending_line = cJSON_Duplicate(o, 1)))
        return pl__err(PL_ENOMEM, "out of memory");
    x->pending_no = x->rd.no;
    x->pending = true;
    return PL_OK;
}

/* An inbox line (export.h): its record decoded with the source id (the
 * checksum binds it) and its human fields checked against it. */
static int take_inbox(import_ctx *x, const cJSON *o)
{
    const char *run = get_str(o, "run"), *rec = get_str(o, "record");
    int64_t seq, sent;
    uint64_t last = x->inbox.n
                        ? pl__get_be64(pl__kvs_key(&x->inbox, x->inbox.n - 1))
                        : 0;
    if (!run || strcmp(run, x->src_id))
        return field_err(&x->rd, "run", "the run's id");
    if (!get_int(o, "seq", 1, INT64_MAX, &seq) || (uint64_t)seq <= last)
        return field_err(&x->rd, "seq", "a seq after the last line's");
    if (!get_int(o, "sent_us", INT64_MIN / 2, INT64_MAX / 2, &sent))
        return field_err(&x->rd, "sent_us", "an integer");
    if ((int64_t)x->inbox.n >= x->inbox_n)
        return pl__err(PL_ECORRUPT,
                       "line %lu: more inbox lines than the run line's "
                       "\"inbox\" (%lld): the export was changed",
                       x->rd.no, (long long)x->inbox_n);
    pl__buf b = {0};
    int oom = 0;
    if (!rec || !hex_decode(&b, rec, &oom)) {
        pl__buf_free(&b);
        return oom ? pl__err(PL_ENOMEM, "out of memory")
                   : field_err(&x->rd, "record", "a hex string");
    }
    pl__inbox_rec r = {0};
    cJSON *payload = NULL;
    int st = pl__inbox_decode(&r, x->src_id, b.data, b.len);
    if (!st && r.name)
        st = pl__payload_decode(&payload, r.payload, r.payload_len);
    if (st) {
        st = pl__err(PL_ECORRUPT,
                     "line %lu: the inbox record does not decode (%s): the "
                     "export was changed",
                     x->rd.no, pl_errmsg());
    } else if (r.sent_us != sent ||
               (r.name ? !get_str(o, "name") ||
                             strcmp(r.name, get_str(o, "name")) ||
                             !pl__export_same_json(
                                 payload,
                                 cJSON_GetObjectItemCaseSensitive(o, "payload"))
                       : !pl__export_same_text(r.reason, strlen(r.reason),
                                               get_str(o, "reason")))) {
        st = pl__err(PL_ECORRUPT,
                     "line %lu: the inbox line does not match its record: "
                     "the export was changed",
                     x->rd.no);
    } else {
        uint8_t key[8];
        pl__put_be64(key, (uint64_t)seq);
        st = pl__kvs_add(&x->inbox, key, 8, b.data, b.len);
    }
    cJSON_Delete(payload);
    pl__inbox_clear(&r);
    pl__buf_free(&b);
    return st;
}

/* The inbox records read, bound to run @p id now, in @p out. */
static int inbox_rebind(const import_ctx *x, const char *id, pl__kvs *out)
{
    return pl__rechain_inbox(&x->inbox, x->src_id, id, 0, out, NULL);
}

/* The run line's other human fields, against its decoded records. */
static int run_fields(const cJSON *o, const pl__run_info *ri,
                      const pl__run_state *rs)
{
    const cJSON *payload = cJSON_GetObjectItemCaseSensitive(o, "payload");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(o, "code");
    const cJSON *head = cJSON_GetObjectItemCaseSensitive(o, "head");
    cJSON *mine = NULL;
    int64_t updated, steps;
    uint8_t h[PL_HASH_LEN];
    const char *what = NULL;
    if (pl__payload_decode(&mine, ri->payload, ri->payload_len) ||
        !pl__export_same_json(mine, payload))
        what = "payload";
    else if (!get_int(o, "updated_us", INT64_MIN / 2, INT64_MAX / 2,
                      &updated) ||
             updated != rs->updated_us)
        what = "updated_us";
    else if (!get_int(o, "steps", 0, INT64_MAX, &steps) ||
             (uint64_t)steps != rs->steps)
        what = "steps";
    else if (rs->has_head
                 ? !get_hash(o, "head", h) || memcmp(h, rs->head, PL_HASH_LEN)
                 : !cJSON_IsNull(head))
        what = "head";
    else if (ri->code ? !cJSON_IsString(code) ||
                            !pl__export_same_text(ri->code, strlen(ri->code),
                                                  code->valuestring)
                      : !cJSON_IsNull(code))
        what = "code";
    cJSON_Delete(mine);
    if (what)
        return pl__err(PL_ECORRUPT,
                       "line 1: \"%s\" does not match the run's records: the "
                       "export was changed",
                       what);
    return PL_OK;
}

/* The run line: its records decoded with the source id (their checksums
 * bind them to it) and its human fields checked against them. */
static int take_run(import_ctx *x, const cJSON *o, pl__run_info *ri,
                    pl__run_state *rs)
{
    const char *kind = get_str(o, "kind"), *status = get_str(o, "status");
    const char *policy = get_str(o, "policy");
    const char *info = get_str(o, "info"), *state = get_str(o, "state");
    int64_t format, num, created;
    pl__buf b = {0};
    int st, oom = 0;
    if (!kind || strcmp(kind, "run"))
        return pl__err(PL_EJSON,
                       "line 1: not a run export (its first line has no "
                       "\"kind\":\"run\")");
    if (!get_int(o, "format", 0, INT32_MAX, &format) ||
        format < PL__EXPORT_FORMAT_MIN || format > PL__EXPORT_FORMAT)
        return pl__err(PL_EVERSION,
                       "line 1: export format is not one this build reads "
                       "(%d to %d)",
                       PL__EXPORT_FORMAT_MIN, PL__EXPORT_FORMAT);
    x->inbox_n = 0; /* format 1 has no inbox lines */
    if (format >= 2 && !get_int(o, "inbox", 0, INT32_MAX, &x->inbox_n))
        return field_err(&x->rd, "inbox", "a count");
    if (!x->src_id || !pl__run_id_ok(x->src_id))
        return field_err(&x->rd, "run", "a run id");
    if (!get_int(o, "run_number", 1, INT64_MAX, &num))
        return field_err(&x->rd, "run_number", "a run number");
    if (!get_int(o, "records", 0, INT64_MAX, &x->records))
        return field_err(&x->rd, "records", "a count");
    if (!get_int(o, "created_us", INT64_MIN / 2, INT64_MAX / 2, &created))
        return field_err(&x->rd, "created_us", "an integer");
    if (!status || !policy)
        return field_err(&x->rd, status ? "policy" : "status", "a string");
    x->src_num = (uint64_t)num;
    if (!info || !hex_decode(&b, info, &oom)) {
        pl__buf_free(&b); /* what was decoded before a byte that is no hex */
        return oom ? pl__err(PL_ENOMEM, "out of memory")
                   : field_err(&x->rd, "info", "a hex string");
    }
    st = pl__run_info_decode(ri, x->src_id, b.data, b.len);
    pl__buf_reset(&b);
    if (st) {
        pl__buf_free(&b);
        return pl__err(PL_ECORRUPT,
                       "line 1: the run's info record does not decode (%s): "
                       "the export was changed",
                       pl_errmsg());
    }
    if (!state || !hex_decode(&b, state, &oom)) {
        pl__buf_free(&b);
        return oom ? pl__err(PL_ENOMEM, "out of memory")
                   : field_err(&x->rd, "state", "a hex string");
    }
    st = pl__run_state_decode(rs, x->src_id, b.data, b.len);
    pl__buf_free(&b);
    if (st)
        return pl__err(PL_ECORRUPT,
                       "line 1: the run's state record does not decode (%s): "
                       "the export was changed",
                       pl_errmsg());
    const char *sname = pl_run_status_name(rs->status);
    if (!sname || strcmp(sname, status) || strcmp(policy, ri->policy) ||
        created != ri->created_us)
        return pl__err(PL_ECORRUPT,
                       "line 1: \"status\", \"policy\" or \"created_us\" does "
                       "not match the run's records: the export was changed");
    return run_fields(o, ri, rs);
}

/* ---- import ----------------------------------------------------------------------- */

/* The open ledgers' heads an imported state records are hashed anew with
 * their steps: the step at the old @p key now hashes to @p h. */
static void rechain_anchor(pl__run_state *rs, const uint8_t *key, size_t klen,
                           const uint8_t h[PL_HASH_LEN])
{
    uint64_t run;
    uint32_t comps[PL_MAX_DEPTH], seq;
    unsigned d;
    if (!rs->n_open || !pl__key_parse(key, klen, &run, comps, &d, &seq))
        return;
    for (size_t i = 0; i < rs->n_open; i++) {
        pl__anchor *a = &rs->open[i];
        if (a->seq == seq && a->depth == d &&
            !memcmp(a->comps, comps, d * sizeof *comps))
            memcpy(a->hash, h, PL_HASH_LEN);
    }
}

int pl_run_import(char **out_run_id, pl_engine *e, FILE *in, const char *new_id)
{
    if (!out_run_id)
        return pl__err(PL_EINVAL, "pl_run_import: out_run_id is NULL");
    *out_run_id = NULL;
    if (!in)
        return pl__err(PL_EINVAL, "pl_run_import: a stream is required");
    if (new_id && !pl__run_id_ok(new_id))
        return pl__err(PL_EINVAL,
                       "pl_run_import: bad new run id '%s' (1..%d "
                       "bytes of [A-Za-z0-9._:@~-])",
                       new_id, PL_MAX_RUN_ID);
    import_ctx x = {0};
    x.rd.in = in;
    x.records = -1;
    pl__run_info ri = {0};
    pl__run_state rs = {0};
    pl__rechain w = {0};
    pl__batch create = {0}, fill = {0};
    atomic_bool lost = false; /* the new run's lease, renewed till whole */
    bool kept = false;
    pl__kvs inbox = {0};
    pl__buf new_info = {0};
    cJSON *o = NULL;
    char *src_id = NULL, *id_copy = NULL, *reason = NULL;
    int st;

    /* read and check everything: nothing is written before this ends */
    if ((st = pl__hasher_new(&x.hasher)) || (st = read_line(&x.rd)))
        goto done;
    if (x.rd.eof) {
        st = pl__err(PL_EJSON, "the export is empty");
        goto done;
    }
    if ((st = parse_line(&o, &x.rd)))
        goto done;
    if (get_str(o, "run") && !(src_id = pl__strdup(get_str(o, "run")))) {
        st = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    x.src_id = src_id;
    if ((st = take_run(&x, o, &ri, &rs)) ||
        (st = pl__rechain_init(&x.check, x.src_id)))
        goto done;
    for (;;) {
        cJSON_Delete(o);
        o = NULL;
        if ((st = read_line(&x.rd)))
            goto done;
        if (x.rd.eof)
            break;
        if ((st = parse_line(&o, &x.rd)))
            goto done;
        const char *kind = get_str(o, "kind");
        if (kind && !strcmp(kind, "inbox"))
            st = take_inbox(&x, o);
        else if (x.inbox.n) /* the inbox lines come last */
            st = pl__err(PL_ECORRUPT,
                         "line %lu: a step after the inbox lines: the "
                         "export was changed",
                         x.rd.no);
        else
            st = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "derived"))
                     ? take_derived(&x, o)
                     : take_step(&x, o);
        if (st) {
            if (strncmp(pl_errmsg(), "line ", 5)) /* name the line */
                st = pl__err(st, "line %lu: %s", x.rd.no, pl_errmsg());
            goto done;
        }
    }
    if (x.pending) {
        st = pl__err(PL_ECORRUPT,
                     "step %s: a derived step that no step folds: the "
                     "export is truncated",
                     x.pending_name);
        goto done;
    }
    if ((int64_t)x.recs.n != x.records || (int64_t)x.inbox.n != x.inbox_n) {
        st = pl__err(PL_ECORRUPT,
                     "the export ends after %zu of its %lld steps and %zu of "
                     "its %lld inbox records: it is truncated",
                     x.recs.n, (long long)x.records, x.inbox.n,
                     (long long)x.inbox_n);
        goto done;
    }
    uint8_t head[PL_HASH_LEN];
    if (rs.has_head && (!pl__rechain_head(&x.check, head) ||
                        memcmp(head, rs.head, PL_HASH_LEN))) {
        st = pl__err(PL_ECORRUPT,
                     "the run's head does not match its root ledger's last "
                     "step: the export was changed");
        goto done;
    }

    /* write: create the run, then its steps and state */
    const char *id = new_id ? new_id : x.src_id;
    uint64_t num;
    if (!e) { /* a check only */
        if (!(*out_run_id = pl__strdup(id)))
            st = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    if (!pl__store_run_find(e->store, id, &num, NULL)) {
        st = pl__err(PL_EEXIST, "pl_run_import: run '%s' exists already", id);
        goto done;
    }
    if (!(id_copy = pl__strdup(id)) ||
        !(reason = pl__asprintf("import of run '%s' did not complete",
                                x.src_id))) {
        st = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    pl__run_state first = {0};
    first.status = PL_RUN_FAILED;
    first.updated_us = first.heartbeat_us = pl__now_us();
    first.error = PL_ESTATE;
    first.reason = reason;
    if ((st = pl__run_info_encode(&new_info, id, &ri)) ||
        (st = pl__run_state_encode(&create.state, id, &first)))
        goto done;
    create.create_id = id;
    create.create_info = &new_info;
    /* a queued or a running run: its lease, held here (and renewed) until it is
     * whole, then handed to the queue, so that a worker with its root policy
     * takes it (a crash between leaves it to expire, and the run `failed`);
     * without one no worker would ever take a running run */
    bool queued = rs.status == PL_RUN_SUBMITTED || rs.status == PL_RUN_RUNNING;
    create.lease_owner = queued ? e->worker : NULL;
    create.lease_us = e->lease_us;
    if ((st = pl__engine_commit(e, &create)))
        goto done;
    if (create.rc) { /* taken meanwhile, or a deleted run's tombstone */
        pl__tomb t;
        st = pl__tomb_load(e, id, &t)
                 ? pl__err(PL_EEXIST, "pl_run_import: run '%s' exists already",
                           id)
                 : pl__tomb_taken(id, &t);
        goto done;
    }
    if (queued && !(st = pl__run_keep_lease(e, create.run, id, 1, &lost)))
        kept = true;
    if (st || (st = pl__rechain_init(&w, id)))
        goto done;
    for (size_t i = 0; !st && i < x.recs.n; i++) {
        uint8_t h[PL_HASH_LEN];
        st = pl__rechain_step(&w, create.run, pl__kvs_key(&x.recs, i),
                              x.recs.e[i].klen, pl__kvs_val(&x.recs, i),
                              x.recs.e[i].vlen, &fill.steps, h);
        if (!st)
            rechain_anchor(&rs, pl__kvs_key(&x.recs, i), x.recs.e[i].klen, h);
    }
    if (st)
        goto done;
    /* the exported state, with no owner: a running run is left for
     * pl_run_continue() or a worker */
    rs.steps = w.steps;
    rs.heartbeat_us = pl__now_us();
    rs.owner_pid = 0;
    rs.owner_start = 0;
    rs.owner_host[0] = '\0';
    if (rs.has_head && !pl__rechain_head(&w, rs.head))
        rs.has_head = false;
    fill.run = create.run;
    /* fenced by the lease the creation took: should this process stall
     * past it and another take the run meanwhile (and, finding it
     * `failed`, drop it), the run stays `failed`, never `running` with no
     * lease for a worker to take (PL_EBUSY) */
    fill.gen = queued ? 1 : 0;
    /* a waiting run gets its timer, as the wait that parked it set it:
     * due at its wake time, or at its deadline to end */
    if (rs.status == PL_RUN_WAITING) {
        int64_t due = rs.wait_until_ms;
        if (ri.deadline_ms && (!due || ri.deadline_ms < due))
            due = ri.deadline_ms;
        fill.timer_us = due > 0 ? due * 1000 : 0;
        fill.timer_id = id;
    }
    /* what was delivered and not consumed, as it was; a waiting run
     * wakes to look, as a delivery makes it */
    if (x.inbox.n) {
        if ((st = inbox_rebind(&x, id, &inbox)))
            goto done;
        fill.inbox_add = &inbox;
        fill.timer_id = id;
        if (rs.status == PL_RUN_WAITING)
            fill.timer_us = pl__now_us();
    }
    if ((st = pl__run_state_encode(&fill.state, id, &rs)) ||
        (st = pl__engine_commit(e, &fill)))
        goto done;
    if (queued) {
        pl__engine_release(e, create.run);
        kept = false;
        pl__run_hand_back(e, create.run, 1, PL__HAND_BACK_US);
    }
    *out_run_id = id_copy;
    id_copy = NULL;
done:
    if (kept)
        pl__engine_release(e, create.run);
    if (st && !strstr(pl_errmsg(), "pl_run_import"))
        st = pl__err(st, "pl_run_import: %s", pl_errmsg());
    cJSON_Delete(o);
    cJSON_Delete(x.pending_line);
    pl__rechain_free(&x.check);
    pl__rechain_free(&w);
    pl__hasher_free(x.hasher);
    pl__kvs_free(&x.recs);
    pl__kvs_free(&x.scratch);
    pl__kvs_free(&x.inbox);
    pl__kvs_free(&inbox);
    pl__buf_free(&x.rec);
    pl__buf_free(&x.rd.line);
    pl__buf_free(&new_info);
    pl__batch_free(&create);
    pl__batch_free(&fill);
    pl__run_info_clear(&ri);
    pl__run_state_clear(&rs);
    free(src_id);
    free(id_copy);
    free(reason);
    return st;
}
