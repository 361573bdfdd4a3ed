/*
 * fuzz_llm_stream.c -- a model's streamed answer (policies/llm/stream.c)
 * for each provider: OpenAI's and Anthropic's server-sent events, Gemini's
 * streamGenerateContent SSE, Ollama's NDJSON.  The first byte picks the
 * provider, the next four the sizes of the pieces the rest arrives in (in
 * turn; 0: all that is left), as a hostile server's bytes cut at any
 * point.  Whatever the bytes: each piece is taken or the stream fails with
 * a kind and a message, never a crash; the same bytes in one piece give
 * the same deltas, the same failure or the same answer (cutting changes
 * nothing); the text deltas add up to the answer's text; an answer that
 * completes parses as a non-streamed one does (fuzz_llm_response's
 * checks); and under a cap one byte short of the stream, the stream fails,
 * unless its final event came within the cap (what follows it is neither
 * read nor counted): then its answer is the whole stream's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_llm.h"

/* Every delta as it came (kind, call index, tool, text), and the text
 * deltas alone. */
typedef struct seen {
    pl__buf all, text;
    bool oom;
} seen;

static void on_delta(const pl_llm_delta *x, void *user)
{
    seen *s = user;
    unsigned char head[1 + sizeof x->tool_index + sizeof x->len];
    head[0] = (unsigned char)x->kind;
    memcpy(head + 1, &x->tool_index, sizeof x->tool_index);
    memcpy(head + 1 + sizeof x->tool_index, &x->len, sizeof x->len);
    const char *tool = x->tool ? x->tool : "";
    if (pl__buf_append(&s->all, head, sizeof head) ||
        pl__buf_append(&s->all, tool, strlen(tool) + 1) ||
        pl__buf_append(&s->all, x->text, x->len) ||
        (x->kind == PL_LLM_DELTA_TEXT &&
         pl__buf_append(&s->text, x->text, x->len)))
        s->oom = true;
}

/* What one reading of the stream came to. */
typedef struct outcome {
    int fail; /* 0, PL__LLM_STREAM_BAD or PL__LLM_STREAM_ERROR */
    char *why;
    cJSON *answer;
    long in, out;
    seen deltas;
} outcome;

/* Read @p body in pieces of the sizes @p sizes gives in turn (NULL: one
 * piece) under the cap @p cap. */
static void read_stream(outcome *o, pl__llm *m, const uint8_t *sizes,
                        const char *body, size_t len, size_t cap)
{
    memset(o, 0, sizeof *o);
    m->o.on_delta = on_delta;
    m->o.delta_user = &o->deltas;
    pl__llm_deltas d = {m, "run-1", "0", 1, NULL, 0, false};
    pl__llm_stream *s = pl__llm_stream_new(m, &d, cap, NULL);
    CHECK(s != NULL);
    size_t at = 0;
    int fed = 0;
    for (unsigned k = 0; at < len && !fed; k++) {
        size_t n = sizes && sizes[k % 4] ? sizes[k % 4] : len - at;
        n = n < len - at ? n : len - at;
        fed = pl__llm_stream_feed(s, body + at, n);
        CHECK(fed == 0 || fed == -1);
        at += n;
    }
    const char *why = NULL;
    CHECK(!fed == !pl__llm_stream_failed(s, &why)); /* -1: it failed */
    int end = pl__llm_stream_end(s, &o->answer, &o->in, &o->out);
    CHECK(end == 0 || end == -1);
    o->fail = pl__llm_stream_failed(s, &why);
    CHECK(!end == !o->fail && !end == !!o->answer);
    CHECK(o->fail == 0 || o->fail == PL__LLM_STREAM_BAD ||
          o->fail == PL__LLM_STREAM_ERROR);
    CHECK(why && *why);
    o->why = o->fail ? pl__strdup(why) : NULL;
    CHECK(!o->fail || o->why);
    pl__llm_stream_free(s);
}

static void outcome_free(outcome *o)
{
    free(o->why);
    cJSON_Delete(o->answer);
    pl__buf_free(&o->deltas.all);
    pl__buf_free(&o->deltas.text);
}

static bool same_buf(const pl__buf *a, const pl__buf *b)
{
    return a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    pl__llm m;
    model_of(&m, data[0]);
    const char *body = (const char *)data + 5;
    size_t len = size - 5;

    outcome cut, whole;
    read_stream(&cut, &m, data + 1, body, len, (size_t)1 << 24);
    read_stream(&whole, &m, NULL, body, len, (size_t)1 << 24);
    CHECK(!cut.deltas.oom && !whole.deltas.oom);
    /* cutting changes nothing */
    CHECK(cut.fail == whole.fail);
    CHECK(!cut.fail || strcmp(cut.why, whole.why) == 0);
    CHECK(same_buf(&cut.deltas.all, &whole.deltas.all));
    CHECK(same_json(cut.answer, whole.answer) ||
          (!cut.answer && !whole.answer));
    CHECK(cut.in == whole.in && cut.out == whole.out);
    if (cut.answer) {
        /* the text is what the text deltas said */
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cut.answer, "text");
        size_t tl = cJSON_IsString(t) ? strlen(t->valuestring) : 0;
        CHECK(tl == cut.deltas.text.len &&
              (!tl || !memcmp(t->valuestring, cut.deltas.text.data, tl)));
        check_answer(&m, cut.answer, cut.in, cut.out);
    }

    /* a stream one byte larger than the cap fails, however it is cut,
     * unless its final event came within the cap: the whole's answer */
    if (len) {
        outcome capped;
        read_stream(&capped, &m, data + 1, body, len, len - 1);
        CHECK((capped.fail && !capped.answer) ||
              (capped.answer && same_json(capped.answer, whole.answer) &&
               same_buf(&capped.deltas.all, &whole.deltas.all)));
        outcome_free(&capped);
    }
    outcome_free(&whole);
    outcome_free(&cut);
    return 0;
}
