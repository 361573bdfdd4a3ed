/*
 * reqcache.c -- a turn's request, built on the earlier turns' work.
 *
 * Under loop(N) an LLM policy's ledger is the conversation, and every turn
 * sends all of it again.  Rebuilding it from the ledger each turn would
 * cost more per turn as the conversation grows, so the policy keeps, per
 * invocation, what it built for the last turn (a state):
 *
 *   field        what it holds
 *   key          the run's id, '\n', the invocation's path
 *   text         the body's head and every message that can no longer
 *                change, encoded for the provider ("sealed"); during a turn
 *                followed by the open messages and the body's tail
 *   sealed       text's length without the turn's part
 *   sha          SHA-256 over text[0, sealed), saved to go on from
 *   conv         the messages after the sealed ones, still open: a tool
 *                call waiting for its result, a run of tool results that
 *                a provider joins into one message
 *   n            how many ledger steps it has taken in
 *   prev, last   step n-1's chain link (pl_step_prev_hash(): the hash of
 *                step n-2, which covers steps 0..n-2) and its own
 *                fingerprint (type, actor, payload as JSON text)
 *   user         the action's payload (the user's message)
 *   frame, sig   the body's head and tail (pl__llm_body_frame()) and what
 *                they were made from: the offered tools' names,
 *                descriptions and schemas as registered
 *
 * A turn takes its invocation's state out of the cache, checks it still
 * describes the ledger's first n steps (link, fingerprint, head, user),
 * takes in the new steps, seals what can no longer change (encoded and
 * hashed once, never again), and encodes and hashes only the open rest and
 * the tail.  After the turn's exchange the state goes back.  A state that
 * does not match is rebuilt from the ledger: the cache changes what a turn
 * costs, never the bytes it sends.
 *
 * The cache is the policy's (freed with the registry) and holds at most
 * CACHE_MAX states and CACHE_MAX_BYTES of bodies, the least recently used
 * going first, none larger than STATE_MAX_BYTES.  Its mutex guards only the list: a state taken out is
 * its turn's alone, so the runs of a pool build their requests at once.  A
 * child made by fork() builds every request afresh and keeps nothing (its
 * copy of the mutex may have been held by another thread at the fork).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llm.h"
#include "sha256.h"

#define CACHE_MAX 64
#define CACHE_MAX_BYTES ((size_t)256 << 20)
#define STATE_MAX_BYTES ((size_t)64 << 20)

typedef struct pl__llm_reqstate {
    struct pl__llm_reqstate *next;
    char *key;
    pl__buf text;
    size_t sealed;
    size_t head_len; /* of the head text starts with */
    bool any;        /* a message is sealed: the next one follows a ',' */
    pl__hasher *sha, *turn;
    pl__llm_conv conv;
    size_t n;
    uint8_t prev[PL_HASH_LEN];
    pl__buf last; /* empty: the state cannot be checked, start afresh */
    cJSON *user;
    char *frame;       /* the body of no messages */
    size_t frame_head; /* its head's length */
    pl__buf sig;
    unsigned n_exchanges;
    long script_pos;
} pl__llm_reqstate;

struct pl__llm_reqcache {
    pthread_mutex_t mu;
    pl__llm_reqstate *head; /* the most recently used first */
    size_t n, bytes;        /* states, and their bodies' buffers */
    pid_t owner; /* a fork()ed child keeps nothing: the mutex may be held */
};

static void state_free(pl__llm_reqstate *s)
{
    if (!s)
        return;
    free(s->key);
    pl__buf_free(&s->text);
    pl__hasher_free(s->sha);
    pl__hasher_free(s->turn);
    pl__llm_conv_free(&s->conv);
    pl__buf_free(&s->last);
    cJSON_Delete(s->user);
    free(s->frame);
    pl__buf_free(&s->sig);
    free(s);
}

struct pl__llm_reqcache *pl__llm_reqcache_new(void)
{
    struct pl__llm_reqcache *c = calloc(1, sizeof *c);
    if (c && pthread_mutex_init(&c->mu, NULL)) {
        free(c);
        c = NULL;
    }
    if (c)
        c->owner = getpid();
    return c;
}

void pl__llm_reqcache_free(struct pl__llm_reqcache *c)
{
    if (!c)
        return;
    for (pl__llm_reqstate *s = c->head, *next; s; s = next) {
        next = s->next;
        state_free(s);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Take the state of @p key out of the cache, or NULL. */
static pl__llm_reqstate *take(struct pl__llm_reqcache *c, const char *key)
{
    if (c->owner != getpid())
        return NULL;
    pthread_mutex_lock(&c->mu);
    pl__llm_reqstate **p = &c->head, *s;
    while ((s = *p) && strcmp(s->key, key) != 0)
        p = &s->next;
    if (s) {
        *p = s->next;
        s->next = NULL;
        c->n--;
        c->bytes -= s->text.cap;
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* Put @p s first; the least recently used states past the bounds go. */
static void put(struct pl__llm_reqcache *c, pl__llm_reqstate *s)
{
    pl__llm_reqstate *drop = NULL;
    if (c->owner != getpid()) {
        state_free(s);
        return;
    }
    pthread_mutex_lock(&c->mu);
    s->next = c->head;
    c->head = s;
    c->n++;
    c->bytes += s->text.cap;
    while (c->n > CACHE_MAX || (c->n > 1 && c->bytes > CACHE_MAX_BYTES)) {
        pl__llm_reqstate **p = &c->head;
        while ((*p)->next)
            p = &(*p)->next;
        pl__llm_reqstate *last = *p;
        *p = NULL;
        c->n--;
        c->bytes -= last->text.cap;
        last->next = drop;
        drop = last;
    }
    pthread_mutex_unlock(&c->mu);
    while (drop) {
        pl__llm_reqstate *next = drop->next;
        state_free(drop);
        drop = next;
    }
}

/*
 * A step's fingerprint: enough to tell it from any other at its place: its
 * type, actor and payload as the request is built from it (the payload
 * printed: equal text, equal messages).  PL_OK or PL_ENOMEM.
 */
static int fingerprint(pl__buf *out, const pl_step *s)
{
    const cJSON *payload = pl_step_payload(s);
    char *text = payload ? cJSON_PrintUnformatted(payload) : NULL;
    if (!text)
        return pl__err(PL_ENOMEM, "out of memory fingerprinting a step");
    uint8_t type = (uint8_t)pl_step_type_of(s);
    const char *actor = pl_step_actor(s);
    pl__buf_reset(out);
    int st = pl__buf_append(out, &type, 1);
    if (!st)
        st = pl__buf_append(out, actor, strlen(actor) + 1);
    if (!st)
        st = pl__buf_append(out, text, strlen(text));
    free(text);
    return st;
}

static bool same_fingerprint(const pl__buf *f, const pl_step *s)
{
    pl__buf now = {0};
    bool same = !fingerprint(&now, s) && now.len == f->len &&
                memcmp(now.data, f->data, f->len) == 0;
    pl__buf_free(&now);
    return same;
}

/* What the body's frame is made of, besides the policy itself: the offered
 * tools as registered (see make_tools() in llm.c). */
static int tools_sig(pl__buf *out, pl_ctx *ctx, const pl__llm *m,
                     const pl_action *a)
{
    const pl_registry *reg = pl_engine_registry(pl_ctx_engine(ctx));
    pl__buf_reset(out);
    int st = PL_OK;
    for (size_t i = 0; !st && i < a->n_actions; i++) {
        const pl_policy_def *d = pl_registry_find(reg, a->actions[i]);
        const char *parts[3] = {a->actions[i],
                                d && d->description ? d->description : "\1",
                                d && d->input_schema ? d->input_schema : "\1"};
        for (int k = 0; !st && k < 3; k++)
            st = pl__buf_append(out, parts[k], strlen(parts[k]) + 1);
    }
    char submit = pl__llm_has_submit(m, a) ? 's' : '-';
    if (!st)
        st = pl__buf_append(out, &submit, 1);
    return st ? pl__err(st, "out of memory") : PL_OK;
}

/* Start @p s afresh: the body's head, the first messages. */
static int state_fresh(pl__llm_reqstate *s, const pl__llm *m,
                       const pl_action *a, const char *frame, size_t head_len)
{
    pl__llm_conv_free(&s->conv);
    pl__buf_reset(&s->last);
    s->n = 0;
    s->any = false;
    s->n_exchanges = 0;
    s->script_pos = 0;
    s->head_len = head_len;
    pl__buf_reset(&s->text);
    int st = PL_OK;
    if (!s->sha && (st = pl__hasher_new(&s->sha)))
        return st;
    if (!s->turn && (st = pl__hasher_new(&s->turn)))
        return st;
    if ((st = pl__buf_append(&s->text, frame, head_len)))
        return pl__err(st, "out of memory");
    s->sealed = head_len;
    if ((st = pl__hash_init(s->sha)) ||
        (st = pl__hash_update(s->sha, frame, head_len)))
        return st;
    return pl__llm_conv_start(&s->conv, m, a, !pl__llm_system_apart(m));
}

static bool is_tool(const cJSON *msg)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(msg, "role");
    return cJSON_IsString(r) && strcmp(r->valuestring, "tool") == 0;
}

/*
 * Seal the messages that can no longer change: all but an assistant message
 * that tool calls may still join, and, for a provider that joins a run of
 * tool results into one message (Anthropic, Gemini), a run of them at the
 * end.  Not while a tool call waits for its result: the queue points into
 * the messages.
 */
static int seal(pl__llm_reqstate *s, const pl__llm *m)
{
    pl__llm_conv *cv = &s->conv;
    if (cv->head < cv->n)
        return PL_OK;
    cv->head = cv->n = 0;
    int len = cJSON_GetArraySize(cv->msgs), j = len;
    if (j > 0 && cv->open == cJSON_GetArrayItem(cv->msgs, j - 1))
        j--;
    if (pl__llm_joins_tool_results(m))
        while (j > 0 && is_tool(cJSON_GetArrayItem(cv->msgs, j - 1)))
            j--;
    if (j <= 0)
        return PL_OK;
    cJSON *seg = cJSON_CreateArray();
    if (!seg)
        return pl__err(PL_ENOMEM, "out of memory");
    for (int i = 0; i < j; i++)
        cJSON_AddItemToArray(seg, cJSON_DetachItemFromArray(cv->msgs, 0));
    size_t before = s->text.len;
    int st = pl__llm_encode_messages(&s->text, m, seg, s->any);
    cJSON_Delete(seg);
    if (!st && s->text.len > before) {
        s->any = true;
        st = pl__hash_update(s->sha, s->text.data + before,
                             s->text.len - before);
    }
    s->sealed = s->text.len;
    return st;
}

/* Does @p s still describe the first s->n steps of @p ledger? */
static bool state_fits(const pl__llm_reqstate *s, const pl_steps *ledger,
                       const char *frame, size_t head_len, const cJSON *user)
{
    if (!s->sha || !s->user || !cJSON_Compare(s->user, user, true) ||
        s->n > pl_steps_count(ledger) || s->head_len != head_len ||
        s->text.len < head_len || memcmp(s->text.data, frame, head_len) != 0)
        return false;
    if (!s->n)
        return true;
    if (!s->last.len)
        return false;
    const pl_step *last = pl_steps_at(ledger, s->n - 1);
    uint8_t prev[PL_HASH_LEN];
    if (pl_step_prev_hash(prev, last) || memcmp(prev, s->prev, sizeof prev))
        return false;
    return same_fingerprint(&s->last, last);
}

/* Take in steps [s->n, count) of @p ledger. */
static int take_in(pl__llm_reqstate *s, const pl__llm *m,
                   const pl_steps *ledger)
{
    size_t count = pl_steps_count(ledger);
    int st = PL_OK;
    for (size_t i = s->n; !st && i < count; i++) {
        const pl_step *step = pl_steps_at(ledger, i);
        if ((st = pl__llm_conv_step(&s->conv, m, step)))
            break;
        const cJSON *x = pl__llm_exchange_of(step);
        if (!x)
            continue;
        s->n_exchanges++;
        const cJSON *next = cJSON_GetObjectItemCaseSensitive(x, "script_next");
        if (cJSON_IsNumber(next) && next->valuedouble >= 0 &&
            next->valuedouble < 1e9)
            s->script_pos = (long)next->valuedouble;
    }
    if (!st)
        st = seal(s, m);
    if (st)
        return st;
    s->n = count;
    pl__buf_reset(&s->last);
    if (count) { /* without a link or a fingerprint: afresh next turn */
        const pl_step *last = pl_steps_at(ledger, count - 1);
        if (pl_step_prev_hash(s->prev, last) || fingerprint(&s->last, last))
            pl__buf_reset(&s->last);
        pl__err_clear();
    }
    return PL_OK;
}

int pl__llm_request_build(pl__llm_request *out, pl_ctx *ctx, const pl__llm *m,
                          const pl_action *a, const pl__llm_tool *tools,
                          size_t n_tools)
{
    memset(out, 0, sizeof *out);
    const pl_steps *ledger = NULL;
    char *key = NULL;
    pl__buf sig = {0};
    pl__llm_reqstate *s = NULL;
    int st = pl_ctx_ledger(&ledger, ctx);
    if (!st)
        st = tools_sig(&sig, ctx, m, a);
    if (st)
        goto done;
    key = pl__asprintf("%s\n%s", pl_ctx_run_id(ctx), pl_ctx_path(ctx));
    if (!key) {
        st = pl__err(PL_ENOMEM, "out of memory");
        goto done;
    }
    s = m->cache ? take(m->cache, key) : NULL;
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) {
            st = pl__err(PL_ENOMEM, "out of memory");
            goto done;
        }
        s->key = key;
        key = NULL;
    }
    /* the frame, made again when the tools are not the ones it was made of */
    if (!s->frame || s->sig.len != sig.len ||
        memcmp(s->sig.data, sig.data, sig.len) != 0) {
        char *frame = NULL;
        size_t head_len = 0;
        if ((st = pl__llm_body_frame(&frame, &head_len, m, tools, n_tools)))
            goto done;
        free(s->frame);
        s->frame = frame;
        s->frame_head = head_len;
        pl__buf_free(&s->sig);
        s->sig = sig;
        memset(&sig, 0, sizeof sig);
    }
    if (!state_fits(s, ledger, s->frame, s->frame_head, a->payload)) {
        cJSON_Delete(s->user);
        s->user = a->payload ? cJSON_Duplicate(a->payload, 1)
                             : cJSON_CreateObject();
        if (!s->user) {
            st = pl__err(PL_ENOMEM, "out of memory");
            goto done;
        }
        if ((st = state_fresh(s, m, a, s->frame, s->frame_head)))
            goto done;
    }
    if ((st = take_in(s, m, ledger)))
        goto done;
    /* the turn's part: the open messages and the tail, after the sealed */
    const char *tail = s->frame + s->frame_head;
    st = pl__llm_encode_messages(&s->text, m, s->conv.msgs, s->any);
    if (!st && (st = pl__buf_append(&s->text, tail, strlen(tail) + 1)))
        st = pl__err(st, "out of memory");
    if (st)
        goto done;
    s->text.len--; /* the NUL is there, not counted */
    uint8_t md[PL_HASH_LEN];
    pl__hasher_copy(s->turn, s->sha);
    if ((st = pl__hash_update(s->turn, s->text.data + s->sealed,
                              s->text.len - s->sealed)) ||
        (st = pl__hash_final(s->turn, md)))
        goto done;
    pl__hex(out->sha256, md, sizeof md);
    out->body = (const char *)s->text.data;
    out->len = s->text.len;
    out->n_exchanges = s->n_exchanges;
    out->script_pos = s->script_pos;
    out->state = s;
    s = NULL;
done:
    state_free(s);
    pl__buf_free(&sig);
    free(key);
    return st;
}

void pl__llm_request_done(pl__llm_request *r, const pl__llm *m, bool keep)
{
    pl__llm_reqstate *s = r->state;
    r->state = NULL;
    r->body = NULL;
    if (!s)
        return;
    s->text.len = s->sealed;
    if (keep && m->cache && s->text.cap <= STATE_MAX_BYTES)
        put(m->cache, s);
    else
        state_free(s);
}
