/*
 * decorator_cap.c -- cap(max_bytes): a result too large for its caller is
 * replaced by a truncated one that says so.
 *
 * Written with the public API alone (include/policyledger.h), as any
 * user's decorator would be.
 *
 * The inner chain's result (its last step) is measured as compact JSON
 * text.  Over the cap, the decorator records an `action_result` by "cap":
 *
 *   member           value
 *   truncated        true
 *   original_bytes   the size of the result's compact JSON text
 *   max_bytes        the cap
 *   note             a sentence saying the result was truncated
 *   preview          the start of that text, cut on a UTF-8 boundary so
 *                    the whole replacement fits in the cap
 *
 * (an error result's replacement is an error too, of its step type, with
 * "error", its "code" and a "message"), which becomes the call's result;
 * the full result stays in the callee's ledger.  Nothing is ever cut silently.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <policyledger.h>

/* The replacement with a preview of the first @p keep bytes of @p text;
 * for an error result (@p err), an error of its @p code (NULL: none). */
static int replacement(cJSON **out, const char *text, size_t len, size_t keep,
                       size_t cap, bool err, const char *code)
{
    char note[120];
    snprintf(note, sizeof note,
             "truncated: the result is %zu bytes of JSON, the cap %zu", len,
             cap);
    char *preview = malloc(keep + 1);
    if (!preview)
        return pl_errorf(PL_ENOMEM, "cap: out of memory");
    memcpy(preview, text, keep);
    preview[keep] = '\0';
    int st = pl_json_pack(out, "{s:b, s:I, s:I, s:s, s:s}", "truncated", 1,
                          "original_bytes", (int64_t)len, "max_bytes",
                          (int64_t)cap, "note", note, "preview", preview);
    free(preview);
    if (!st && err &&
        (!cJSON_AddTrueToObject(*out, "error") ||
         (code && !cJSON_AddStringToObject(*out, "code", code)) ||
         !cJSON_AddStringToObject(*out, "message",
                                  "the error result was truncated")))
        st = pl_errorf(PL_ENOMEM, "cap: out of memory");
    return st;
}

/* Back @p keep off a UTF-8 continuation byte, to a character's start. */
static size_t utf8_start(const char *text, size_t keep)
{
    while (keep > 0 && ((unsigned char)text[keep] & 0xc0) == 0x80)
        keep--;
    return keep;
}

static int cap_fn(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                  const pl_decorator *self, pl_next *next)
{
    size_t cap = (size_t)self->arg;
    if (cap == 0)
        return pl_errorf(PL_EINVAL, "cap: max_bytes is 0");
    size_t before = pl_steps_count(out);
    int st = pl_next_call(next, ctx, action, out);
    size_t n = pl_steps_count(out);
    if (st || n == before)
        return st;
    const pl_step *last = pl_steps_at(out, n - 1);
    /* an error result stays an error of its code, for the caller (or a
     * retry outside cap) to see that the call failed */
    bool err = pl_step_is_error(last);
    const char *code = pl_step_error_code(last);
    pl_step_type type = err ? pl_step_type_of(last) : PL_STEP_ACTION_RESULT;
    char *text = cJSON_PrintUnformatted(pl_step_payload(last));
    if (!text)
        return pl_errorf(PL_ENOMEM, "cap: out of memory");
    size_t len = strlen(text);
    if (len <= cap) {
        free(text);
        return PL_OK;
    }
    /* the preview gets what the rest of the replacement leaves; its JSON
     * escapes may take more than its bytes, so shrink until it fits */
    cJSON *r = NULL;
    size_t keep = utf8_start(text, cap < len ? cap : len);
    for (;;) {
        cJSON_Delete(r);
        r = NULL;
        if ((st = replacement(&r, text, len, keep, cap, err, code)))
            break;
        char *rt = cJSON_PrintUnformatted(r);
        if (!rt) {
            st = pl_errorf(PL_ENOMEM, "cap: out of memory");
            break;
        }
        size_t rlen = strlen(rt);
        free(rt);
        if (rlen <= cap || keep == 0)
            break;
        size_t over = rlen - cap;
        keep = utf8_start(text, over < keep ? keep - over : 0);
    }
    free(text);
    if (!st)
        st = pl_ctx_emit(ctx, out, type, "cap", r);
    cJSON_Delete(r);
    return st;
}

int pl_decorator_cap(pl_decorator *out, size_t max_bytes)
{
    if (!out)
        return pl_errorf(PL_EINVAL, "pl_decorator_cap: out is NULL");
    if (max_bytes == 0)
        return pl_errorf(PL_EINVAL, "pl_decorator_cap: a cap of 0 bytes "
                                    "leaves no result: give 1 or more");
    pl_decorator d = PL_DECORATOR_INIT;
    d.fn = cap_fn;
    d.name = "cap";
    d.arg = max_bytes;
    *out = d;
    return PL_OK;
}
