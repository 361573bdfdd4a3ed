/*
 * support_otel.c -- what the OpenTelemetry exporter's tests share (see
 * support_otel.h).
 */
#include "support_otel.h"

#include <stdio.h>
#include <string.h>

void ot_receiver(t_server *s, const char *rest)
{
    char script[256];
    snprintf(script, sizeof script, "{\"responses\": [], \"rest\": %s}", rest);
    t_server_start(s, script);
}

const char *ot_endpoint(const t_server *s)
{
    static char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", s->port);
    return url;
}

pl_otel *ot_exporter(const char *url)
{
    pl_otel_options oo = PL_OTEL_OPTIONS_INIT;
    oo.endpoint = url;
    oo.flush_interval_ms = 50;
    pl_otel *x = NULL;
    int st = pl_otel_open(&x, &oo);
    cr_assert_eq(st, PL_OK, "pl_otel_open: %s", pl_errmsg());
    return x;
}

/* Every span the receiver got so far (caller frees): an array. */
cJSON *ot_spans(const t_server *s)
{
    cJSON *log = t_server_log(s);
    cJSON *all = cJSON_CreateArray();
    const cJSON *req;
    cJSON_ArrayForEach(req, log)
    {
        cr_expect_str_eq(t_str(req, "path"), "/v1/traces");
        cr_expect_str_eq(t_str(req, "content_type"), "application/json");
        const cJSON *body = cJSON_GetObjectItemCaseSensitive(req, "body");
        const cJSON *rs = cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(body, "resourceSpans"), 0);
        cr_assert_not_null(rs, "a request without resourceSpans");
        const cJSON *rattr = cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(rs, "resource"), "attributes"),
            0);
        cr_expect_str_eq(t_str(rattr, "key"), "service.name");
        const cJSON *ss = cJSON_GetArrayItem(
            cJSON_GetObjectItemCaseSensitive(rs, "scopeSpans"), 0);
        cr_expect_str_eq(t_str(cJSON_GetObjectItemCaseSensitive(ss, "scope"),
                               "name"),
                         "policyledger");
        const cJSON *sp;
        cJSON_ArrayForEach(sp, cJSON_GetObjectItemCaseSensitive(ss, "spans"))
            cJSON_AddItemToArray(all, cJSON_Duplicate(sp, true));
    }
    cJSON_Delete(log);
    return all;
}

/* The attribute @p key of span @p sp: its typed value object, or NULL. */
const cJSON *ot_attr(const cJSON *sp, const char *key)
{
    const cJSON *kv;
    cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(sp, "attributes"))
    {
        const char *k = t_str(kv, "key");
        if (k && !strcmp(k, key))
            return cJSON_GetObjectItemCaseSensitive(kv, "value");
    }
    return NULL;
}

const char *ot_attr_s(const cJSON *sp, const char *key)
{
    return t_str(ot_attr(sp, key), "stringValue");
}

/* The span of @p run at @p path, the last one received; NULL if none. */
const cJSON *ot_span_at(const cJSON *spans, const char *run, const char *path)
{
    const cJSON *sp, *found = NULL;
    cJSON_ArrayForEach(sp, spans)
    {
        const char *r = ot_attr_s(sp, "policyledger.run_id");
        const char *p = ot_attr_s(sp, "policyledger.path");
        if (r && p && !strcmp(r, run) && !strcmp(p, path))
            found = sp;
    }
    return found;
}

void ot_flush(pl_otel *x)
{
    int st = pl_otel_flush(x, 60000);
    cr_assert_eq(st, PL_OK, "pl_otel_flush: %s", pl_errmsg());
}
