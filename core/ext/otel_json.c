/*
 * otel_json.c -- the OpenTelemetry exporter's request body (otel.c sends
 * it): finished spans as OTLP/HTTP JSON,
 *
 *   {"resourceSpans": [{"resource": {"attributes": [service.name]},
 *     "scopeSpans": [{"scope": {"name": "policyledger"},
 *                     "spans": [span, ...]}]}]}
 *
 *   span member        value
 *   traceId            hex of SHA-256(run id)[0..16]
 *   spanId             hex of SHA-256(run id NUL path)[0..8]; the run's
 *                      path is "0", a call's is its callee's path
 *   parentSpanId       a call's: its caller's span ("0" is the run's);
 *                      left out for the run
 *   name, kind         the callee (the run: "run " root policy), 1
 *                      (SPAN_KIND_INTERNAL)
 *   start/endTimeUnixNano   decimal strings
 *   attributes         policyledger.* (see the header), typed values;
 *                      gen_ai.usage.input_tokens / output_tokens on a
 *                      call whose end event carries a model's tokens
 *   status             {"code": 2, "message": detail} when failed (or
 *                      its lease lost, or its execution interrupted)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <policyledger.h>

#include <openssl/sha.h>

#include "ext.h"
#include "otel.h"

static bool hex_id(char *out, const char *run, const char *path, size_t bytes)
{
    uint8_t md[SHA256_DIGEST_LENGTH];
    size_t rn = strlen(run), pn = path ? strlen(path) : 0;
    char *buf = malloc(rn + 1 + pn);
    if (!buf)
        return false;
    memcpy(buf, run, rn);
    size_t n = rn;
    if (path) {
        buf[n++] = '\0';
        memcpy(buf + n, path, pn);
        n += pn;
    }
    bool ok = SHA256((const unsigned char *)buf, n, md) != NULL;
    free(buf);
    if (!ok)
        return false;
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < bytes; i++) {
        out[2 * i] = digits[md[i] >> 4];
        out[2 * i + 1] = digits[md[i] & 15];
    }
    out[2 * bytes] = '\0';
    return true;
}

static bool add_attr(cJSON *arr, const char *key, const char *type,
                     cJSON *value)
{
    cJSON *kv = cJSON_CreateObject();
    cJSON *v = cJSON_CreateObject();
    if (!kv || !v || !value || !cJSON_AddItemToArray(arr, kv)) {
        cJSON_Delete(kv);
        cJSON_Delete(v);
        cJSON_Delete(value);
        return false;
    }
    if (!cJSON_AddStringToObject(kv, "key", key) ||
        !cJSON_AddItemToObject(kv, "value", v)) {
        cJSON_Delete(v);
        cJSON_Delete(value);
        return false;
    }
    return cJSON_AddItemToObject(v, type, value);
}

static bool attr_str(cJSON *arr, const char *key, const char *s)
{
    return add_attr(arr, key, "stringValue", cJSON_CreateString(s));
}

static bool attr_int(cJSON *arr, const char *key, int64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%lld", (long long)v);
    return add_attr(arr, key, "intValue", cJSON_CreateString(num));
}

static bool add_time(cJSON *o, const char *key, int64_t ns)
{
    char num[24];
    snprintf(num, sizeof num, "%lld", (long long)(ns < 0 ? 0 : ns));
    return cJSON_AddStringToObject(o, key, num) != NULL;
}

static cJSON *span_json(const pl__otel_span *s)
{
    char trace[33], id[17], parent[17];
    const char *slash = s->is_call ? strrchr(s->path, '.') : NULL;
    char ppath[PATH_BUF];
    if (slash)
        snprintf(ppath, sizeof ppath, "%.*s", (int)(slash - s->path), s->path);
    if (!hex_id(trace, s->run_id, NULL, 16) ||
        !hex_id(id, s->run_id, s->path, 8) ||
        (slash && !hex_id(parent, s->run_id, ppath, 8)))
        return NULL;
    char name[PL_MAX_NAME + 8];
    snprintf(name, sizeof name, "%s%s", s->is_call ? "" : "run ", s->policy);
    cJSON *o = cJSON_CreateObject();
    cJSON *attrs = cJSON_CreateArray();
    bool ok = o && attrs && cJSON_AddItemToObject(o, "attributes", attrs);
    if (!ok)
        cJSON_Delete(attrs);
    ok = ok && cJSON_AddStringToObject(o, "traceId", trace) &&
         cJSON_AddStringToObject(o, "spanId", id) &&
         (!slash || cJSON_AddStringToObject(o, "parentSpanId", parent)) &&
         cJSON_AddStringToObject(o, "name", name) &&
         cJSON_AddNumberToObject(o, "kind", 1) &&
         add_time(o, "startTimeUnixNano", s->start_ns) &&
         add_time(o, "endTimeUnixNano", s->end_ns);
    ok = ok && attr_str(attrs, "policyledger.run_id", s->run_id) &&
         attr_str(attrs, "policyledger.path", s->path) &&
         attr_str(attrs, "policyledger.policy", s->policy) &&
         attr_str(attrs, "policyledger.outcome",
                  s->outcome ? s->outcome : "unknown");
    if (ok && s->is_call)
        ok = attr_int(attrs, "policyledger.step", s->step) &&
             add_attr(attrs, "policyledger.served", "boolValue",
                      cJSON_CreateBool(s->served));
    if (ok && (s->tokens_in || s->tokens_out))
        ok = attr_int(attrs, "gen_ai.usage.input_tokens",
                      s->tokens_in > INT64_MAX ? INT64_MAX
                                               : (int64_t)s->tokens_in) &&
             attr_int(attrs, "gen_ai.usage.output_tokens",
                      s->tokens_out > INT64_MAX ? INT64_MAX
                                                : (int64_t)s->tokens_out);
    /* a lease lost, or an execution interrupted, ends in error: the run
     * goes on elsewhere or later, in spans of their own */
    bool error_result = s->outcome && !strcmp(s->outcome, "failed");
    /* stopped: an error, but where it is the run's way (a check at its
     * record's end, a run left for newer code) */
    bool stopped = s->outcome && !strcmp(s->outcome, "stopped") &&
                   s->status != PL_ECHECK && s->status != PL_ENEWERCODE;
    bool failed = error_result || stopped ||
                  (s->outcome && (!strcmp(s->outcome, "lease_lost") ||
                                  !strcmp(s->outcome, "interrupted")));
    if (ok && s->status)
        ok = attr_str(attrs, "policyledger.status", pl_status_name(s->status));
    else if (ok && error_result && s->detail && s->is_call)
        ok = attr_str(attrs, "policyledger.error_code", s->detail);
    if (ok) {
        cJSON *st = cJSON_AddObjectToObject(o, "status");
        ok = st && cJSON_AddNumberToObject(st, "code", failed ? 2 : 0) &&
             (!failed || !s->detail ||
              cJSON_AddStringToObject(st, "message", s->detail));
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

char *pl__otel_body(const char *service, pl__otel_span *const *v, size_t k)
{
    cJSON *doc = cJSON_CreateObject();
    cJSON *rss = cJSON_AddArrayToObject(doc, "resourceSpans");
    cJSON *rs = cJSON_CreateObject();
    if (!cJSON_AddItemToArray(rss, rs)) {
        cJSON_Delete(rs);
        rs = NULL;
    }
    cJSON *res = cJSON_AddObjectToObject(rs, "resource");
    cJSON *rattrs = cJSON_AddArrayToObject(res, "attributes");
    cJSON *sss = cJSON_AddArrayToObject(rs, "scopeSpans");
    cJSON *ss = cJSON_CreateObject();
    if (!cJSON_AddItemToArray(sss, ss)) {
        cJSON_Delete(ss);
        ss = NULL;
    }
    cJSON *scope = cJSON_AddObjectToObject(ss, "scope");
    cJSON *spans = cJSON_AddArrayToObject(ss, "spans");
    if (!rattrs || !attr_str(rattrs, "service.name", service) ||
        !cJSON_AddStringToObject(scope, "name", "policyledger"))
        spans = NULL;
    bool ok = spans != NULL;
    for (size_t i = 0; ok && i < k; i++) {
        cJSON *s = span_json(v[i]);
        ok = s && cJSON_AddItemToArray(spans, s);
        if (!ok)
            cJSON_Delete(s);
    }
    /* UTF-8 whatever bytes a detail holds: a receiver refuses a request
     * that is not, and every span in it with it */
    char *text = ok ? pl__json_print_utf8(doc) : NULL;
    cJSON_Delete(doc);
    return text;
}
