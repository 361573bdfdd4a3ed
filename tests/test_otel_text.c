/*
 * test_otel_text.c -- the OpenTelemetry exporter's requests
 * (core/ext/otel_json.c) are UTF-8 whatever bytes a span's text holds: a
 * run failed with a reason that is not UTF-8 (a policy's message quoting
 * bytes, cut in the middle of a character) is sent with each such byte as
 * U+FFFD.  A receiver reads JSON text as UTF-8 and refuses a request that
 * is not, and every span of the batch with it (the loopback receiver,
 * tests/llm_server.py, logs no body for it).
 */
#include "support_otel.h"

#include <stdio.h>
#include <string.h>

static int garbled(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx, (void)a, (void)out, (void)user;
    return pl_errorf(PL_EPOLICY, "cannot parse 'caf\xc3' \xff end");
}

TestSuite(otel_text, .fini = t_cleanup);

Test(otel_text, a_reason_that_is_not_utf8_is_sent_as_utf8)
{
    t_server s;
    ot_receiver(&s, "{\"status\": 200, \"body\": {}}");
    pl_otel *x = ot_exporter(ot_endpoint(&s));
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "garbled", garbled, NULL), PL_OK);
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_PROCESS;
    eo.on_event = pl_otel_event;
    eo.event_user = x;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    pl_outcome *o = t_start(e, "garbled", "{}", "garbled");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    o = t_start(e, "add", "{\"a\": 1, \"b\": 2}", "fine");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    ot_flush(x);
    cJSON *spans = ot_spans(&s);
    const cJSON *run = ot_span_at(spans, "garbled", "0");
    cr_assert_not_null(run, "the failed run's span was not received");
    const char *msg = t_str(cJSON_GetObjectItemCaseSensitive(run, "status"),
                            "message");
    cr_assert_not_null(msg);
    cr_expect(strstr(msg, "cannot parse 'caf\xef\xbf\xbd' \xef\xbf\xbd end"),
              "%s", msg);
    cr_expect_not_null(ot_span_at(spans, "fine", "0"));
    cJSON_Delete(spans);
    pl_engine_close(e);
    pl_registry_free(reg);
    cr_expect_eq(pl_otel_close(x), PL_OK, "%s", pl_errmsg());
    t_server_stop(&s);
}
