/*
 * test_mcp_http.c -- the Streamable HTTP transport of MCP against a
 * hostile server (tests/mcp_http_server.py, scripted): every kind of
 * status (401, 403, 404, 429 and 503 with and without Retry-After, a 500
 * of HTML, a 400 with a JSON-RPC error, a 1xx before the answer), a
 * redirect to another host (never followed: the bearer token never goes
 * there), session ids that are empty, 1 MB long, hold CR or NUL, change
 * between answers or go missing, a session that expires (a new one is
 * started and the call sent again, the old one ended with a DELETE, as
 * one left after an error is; a server that refuses DELETE changes
 * nothing), a Content-Type that lies, a gzip body
 * and a gzip bomb, an answer that never ends (bounded by the call's
 * deadline) and a 50 MB header block.  Each is an error result of the
 * taxonomy or a recovery, never a crash, a hang or a token sent astray.
 */
#include "support_mcp.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TestSuite(mcp_http, .init = setup, .fini = teardown, .timeout = 300);

/* The deadline of the tests whose one call never answers: every call of
 * theirs has it, the ones that must succeed too (a new session begun,
 * through a Python server), so it outlasts a loaded host's stall. */
#define CALL_MS 1500

/* The run of @p n calls of h.echo, {"i": k} each: the "got" array. */
static cJSON *echo_calls(const char *id, int n)
{
    char calls[4096] = "[";
    for (int i = 0; i < n; i++) {
        size_t l = strlen(calls);
        snprintf(calls + l, sizeof calls - l,
                 "%s{\"tool\": \"h.echo\", \"args\": {\"i\": %d}}",
                 i ? ", " : "", i);
    }
    size_t l = strlen(calls);
    snprintf(calls + l, sizeof calls - l, "]");
    return run(id, calls, -1);
}

/* Where in the log the @p nth (from 0) request @p method of session
 * @p sid (NULL: any) is; -1 if it is not.  *e: that entry, in @p l. */
static int index_of(const cJSON *l, const char *method, const char *sid,
                    int nth, const cJSON **e)
{
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, l)
    {
        if (is_request(it, method, sid) && nth-- == 0) {
            if (e)
                *e = it;
            return i;
        }
        i++;
    }
    return -1;
}

/* Session @p sid was ended with a DELETE before the @p nth initialize
 * (-1: at any time), carrying the token and the protocol version as every
 * request does. */
static void deleted_before(const scripted *s, const char *sid, int nth)
{
    cJSON *l = log_of(s);
    const cJSON *d = NULL;
    int at_delete = index_of(l, "DELETE", sid, 0, &d);
    cr_expect_geq(at_delete, 0, "no DELETE of %s: %s", sid, t_text(l));
    if (nth >= 0) {
        int at_init = index_of(l, "initialize", NULL, nth, NULL);
        cr_expect(at_init < 0 || at_delete < at_init,
                  "the DELETE of %s came after initialize %d: %s", sid, nth,
                  t_text(l));
    }
    if (d) {
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "auth_ok")),
                  "%s", t_text(d));
        const char *v = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(d, "protocol_version"));
        cr_expect(v && !strcmp(v, "2025-06-18"), "%s", t_text(d));
    }
    cJSON_Delete(l);
}

/* Each of the @p n results of @p got is its echo: {"i": k}. */
static void all_echoed(const cJSON *got, int n)
{
    for (int i = 0; i < n; i++) {
        char want[16];
        snprintf(want, sizeof want, "\"i\": %d", i);
        cr_expect(strstr(first_text(at(got, i)), want), "%s", t_text(got));
    }
}

static double retry_after_of(const cJSON *r)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, "retry_after_ms");
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* The message of @p r holds nothing of the token nor of an HTML page. */
static void clean_message(const cJSON *r)
{
    const char *m = s_of(r, "message");
    cr_expect(!strstr(m, TOKEN), "%s", m);
    cr_expect(!strstr(m, "<html"), "%s", m);
}

/* ------------------------------------------------------------------------ */
/* Statuses                                                                 */
/* ------------------------------------------------------------------------ */

Test(mcp_http, each_status_is_its_error_of_the_taxonomy, .fini = teardown_http)
{
    /* a server of no session: its 404 is no session's end */
    pl_mcp_options o = quiet();
    open_on("{\"init\": [{\"session\": null}], \"call\": ["
            "{\"status\": 401, \"reason\": \"Unauthorized\"},"
            "{\"status\": 403},"
            "{\"status\": 404},"
            "{\"status\": 429},"
            "{\"status\": 429, \"headers\": [[\"Retry-After\", \"2\"]]},"
            "{\"status\": 503, \"headers\": [[\"Retry-After\", \"1\"]]},"
            "{\"status\": 503},"
            "{\"status\": 500, \"content_type\": \"text/html\", \"body\": "
            "\"<html><body>Internal Server Error</body></html>\"},"
            "{\"status\": 400, \"body\": \"{\\\"jsonrpc\\\": \\\"2.0\\\", "
            "\\\"id\\\": null, \\\"error\\\": {\\\"code\\\": -32600, "
            "\\\"message\\\": \\\"Bad Request: no such thing\\\"}}\"},"
            "{\"status\": 418},"
            "{\"interim\": [100, 103]}]}",
            &o);
    cJSON *got = echo_calls("r1", 11);
    expect_error(at(got, 0), PL_ERR_UNAUTHORIZED, "HTTP 401");
    expect_error(at(got, 1), PL_ERR_FORBIDDEN, "HTTP 403");
    expect_error(at(got, 2), PL_ERR_NOT_FOUND, "HTTP 404");
    expect_error(at(got, 3), PL_ERR_RATE_LIMITED, "HTTP 429");
    cr_expect_eq(retry_after_of(at(got, 3)), -1);
    expect_error(at(got, 4), PL_ERR_RATE_LIMITED, "Retry-After: 2");
    cr_expect_eq(retry_after_of(at(got, 4)), 2000);
    expect_error(at(got, 5), PL_ERR_RETRYABLE_SERVER, "HTTP 503");
    cr_expect_eq(retry_after_of(at(got, 5)), 1000);
    expect_error(at(got, 6), PL_ERR_RETRYABLE_SERVER, "HTTP 503");
    cr_expect_eq(retry_after_of(at(got, 6)), -1);
    expect_error(at(got, 7), PL_ERR_RETRYABLE_SERVER, "HTTP 500");
    expect_error(at(got, 8), PL_ERR_INVALID_INPUT,
                 "HTTP 400 (the server refused the request): Bad Request: "
                 "no such thing");
    expect_error(at(got, 9), PL_ERR_TOOL_BUG, "HTTP 418");
    cr_expect(strstr(first_text(at(got, 10)), "\"i\": 10"), "%s", t_text(got));
    for (int i = 0; i < 10; i++)
        clean_message(at(got, i));
    cJSON_Delete(got);
}

/* The retry decorator waits a 429's Retry-After, then the call succeeds. */
Test(mcp_http, a_429_is_retried_after_its_retry_after, .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": [{\"status\": 429, \"headers\": "
            "[[\"Retry-After\", \"0\"]]}]}",
            &o);
    pl_retry_options ro = PL_RETRY_OPTIONS_INIT;
    ro.base_ms = 1;
    ro.max_backoff_ms = 5;
    cr_assert_eq(pl_decorator_retry(&per_call, &ro), PL_OK);
    cJSON *got = echo_calls("r1", 1);
    cr_expect(strstr(first_text(at(got, 0)), "\"i\": 0"), "%s", t_text(got));
    cJSON_Delete(got);
    cr_expect_eq(requests(&g_servers[0], "tools/call"), 2);
}

/* ------------------------------------------------------------------------ */
/* Redirects                                                                */
/* ------------------------------------------------------------------------ */

Test(mcp_http, a_redirect_to_another_host_is_not_followed,
     .fini = teardown_http)
{
    scripted *other = start_scripted(1, "127.0.0.2", "{}");
    char script[1024];
    snprintf(script, sizeof script,
             "{\"call\": [{\"status\": 307, \"headers\": [[\"Location\", "
             "\"%s\"]]}, {\"status\": 308, \"headers\": [[\"Location\", "
             "\"%s\"]]}, {\"status\": 302, \"headers\": [[\"Location\", "
             "\"%s\"]]}]}",
             other->url, other->url, other->url);
    pl_mcp_options o = quiet();
    open_on(script, &o);
    cJSON *got = echo_calls("r1", 4);
    for (int i = 0; i < 3; i++) {
        expect_error(at(got, i), PL_ERR_TOOL_BUG, "not followed");
        expect_error(at(got, i), PL_ERR_TOOL_BUG, other->url);
        clean_message(at(got, i));
    }
    cr_expect(strstr(first_text(at(got, 3)), "\"i\": 3"), "%s", t_text(got));
    cJSON_Delete(got);
    close_all();
    /* the other host heard nothing, and so never the token */
    cJSON *l = log_of(other);
    cr_expect_eq(cJSON_GetArraySize(l), 0, "%s", t_text(l));
    cJSON_Delete(l);
    /* the server itself had it with each request */
    l = log_of(&g_servers[0]);
    const cJSON *e;
    cJSON_ArrayForEach(e, l)
    {
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "auth_ok")),
                  "%s", t_text(e));
    }
    cJSON_Delete(l);
}

/* ------------------------------------------------------------------------ */
/* Session ids                                                              */
/* ------------------------------------------------------------------------ */

/* An id that is not 1..1024 visible ASCII characters fails registration,
 * saying so; none is sent on. */
Test(mcp_http, a_session_id_that_is_no_id_fails_registration,
     .fini = teardown_http)
{
    static const char *const bad[] = {
        "{\"init\": [{\"session\": \"\"}]}",
        "{\"init\": [{\"session\": \"ab\\rcd\"}]}",
        "{\"init\": [{\"session\": \"ab\\u0000cd\"}]}",
        "{\"init\": [{\"session\": \"has space\"}]}",
        "{\"init\": [{\"session_bytes\": 2000}]}",
        "{\"init\": [{\"session_bytes\": 1048576}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_mcp_options o = quiet();
        int st = register_on(bad[i], &o);
        cr_expect_eq(st, PL_EIO, "%s: %s", bad[i], pl_errmsg());
        cr_expect(strstr(pl_errmsg(), "Mcp-Session-Id") ||
                      strstr(pl_errmsg(), "header"),
                  "%s: %s", bad[i], pl_errmsg());
        cr_expect_null(F.mcp);
        cr_expect_eq(requests(&g_servers[0], "tools/list"), 0, "%s", bad[i]);
        close_all();
        stop_servers();
    }
}

/* The id initialize gave is kept: one that changes in later answers is
 * not followed, nor is one that goes missing. */
Test(mcp_http, the_session_id_is_initializes_whatever_comes_after,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"list\": [{\"session\": \"s-evil\"}], \"call\": ["
            "{\"session\": \"s-other\"}, {\"session\": null},"
            "{\"session\": \"bad\\rid\"}]}",
            &o);
    cJSON *got = echo_calls("r1", 4);
    all_echoed(got, 4);
    cJSON_Delete(got);
    cJSON *l = log_of(&g_servers[0]);
    const cJSON *e;
    cJSON_ArrayForEach(e, l)
    {
        const char *m = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(e, "method"));
        const char *sid = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(e, "session"));
        if (m && strcmp(m, "initialize") != 0)
            cr_expect(sid && strcmp(sid, "s-1") == 0, "%s", t_text(e));
    }
    cJSON_Delete(l);
    cr_expect_eq(requests(&g_servers[0], "initialize"), 1);
}

/* Every request after initialize carries its session id and the version
 * it negotiated; the bearer token is read at each request (a variable
 * unset sends none) and is not in the store. */
Test(mcp_http, each_request_carries_its_session_version_and_token_as_now,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{}", &o);
    cJSON *got = echo_calls("r1", 1);
    cJSON_Delete(got);
    unsetenv("PL_TEST_MCP_TOKEN");
    got = echo_calls("r2", 1);
    setenv("PL_TEST_MCP_TOKEN", TOKEN, 1);
    cr_expect(strstr(first_text(at(got, 0)), "\"i\": 0"), "%s", t_text(got));
    cJSON_Delete(got);
    cJSON *l = log_of(&g_servers[0]);
    const cJSON *e;
    int calls = 0;
    cJSON_ArrayForEach(e, l)
    {
        const char *m = s_of(e, "method");
        bool init = strcmp(m, "initialize") == 0;
        const char *sid = cJSON_GetStringValue(
                       cJSON_GetObjectItemCaseSensitive(e, "session")),
                   *v = cJSON_GetStringValue(
                       cJSON_GetObjectItemCaseSensitive(e, "protocol_version"));
        cr_expect(init ? !sid : sid && strcmp(sid, "s-1") == 0, "%s",
                  t_text(e));
        cr_expect(init || (v && strcmp(v, "2025-06-18") == 0), "%s", t_text(e));
        bool second = strcmp(m, "tools/call") == 0 && calls++ == 1;
        cr_expect_eq(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "auth")),
                     !second, "%s", t_text(e));
    }
    cr_expect_eq(calls, 2);
    cJSON_Delete(l);
    pl_engine_close(F.engine);
    F.engine = NULL;
    FILE *f = t_on_pg() ? NULL : fopen(F.store, "rb");
    static char bytes[1 << 20];
    size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
    cr_expect(!f || n > 0);
    for (size_t i = 0; i + strlen(TOKEN) <= n; i++)
        cr_expect(memcmp(bytes + i, TOKEN, strlen(TOKEN)) != 0,
                  "the token is in the store at %zu", i);
    if (f)
        fclose(f);
}

/* A 404 of the session: a new session is started (initialize again, as
 * the spec says) and the call sent once more in it; a server that ends
 * the new one at once too is a RetryableServer error, no loop. */
Test(mcp_http, an_expired_session_is_started_again_and_the_call_resent,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": [{\"expire\": true}, null,"
            " {\"expire\": true}, {\"expire\": true}]}",
            &o);
    cJSON *got = echo_calls("r1", 1);
    cr_expect(strstr(first_text(at(got, 0)), "\"i\": 0"), "%s", t_text(got));
    cJSON_Delete(got);
    cr_expect_eq(requests(&g_servers[0], "initialize"), 2);
    cJSON *l = log_of(&g_servers[0]);
    const cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, l)
    {
        const char *m = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(e, "method"));
        const char *sid = cJSON_GetStringValue(
            cJSON_GetObjectItemCaseSensitive(e, "session"));
        if (m && strcmp(m, "tools/call") == 0 && k++ == 1)
            cr_expect(sid && strcmp(sid, "s-2") == 0, "%s", t_text(e));
    }
    cJSON_Delete(l);
    got = echo_calls("r2", 1);
    expect_error(at(got, 0), PL_ERR_RETRYABLE_SERVER, "the session ended");
    cJSON_Delete(got);
}

/* A session that ends at a notification (notifications/cancelled, after
 * a call timed out) is begun anew by the next call, which succeeds. */
Test(mcp_http, a_session_ended_at_a_notification_is_begun_anew,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    o.timeout_ms = CALL_MS;
    open_on("{\"call\": [{\"forever\": true, \"sse\": true}],"
            " \"notify\": [null, {\"expire\": true}]}",
            &o);
    cJSON *got = echo_calls("r1", 2);
    expect_error(at(got, 0), PL_ERR_TIMEOUT, "no answer in time");
    cr_expect(strstr(first_text(at(got, 1)), "\"i\": 1"), "%s", t_text(got));
    cJSON_Delete(got);
    cr_expect_eq(requests(&g_servers[0], "notifications/cancelled"), 1);
    cr_expect_eq(requests(&g_servers[0], "initialize"), 2);
    deleted_before(&g_servers[0], "s-1", 1);
}

/* A session that ended (404) and a new one not begun before the call's
 * deadline (initialize never answered): a Timeout that cancels nothing,
 * since no session that lives read the request, and initialize is never
 * cancelled (the spec forbids it).  The next call begins a session and
 * succeeds. */
Test(mcp_http, a_request_no_live_session_read_is_not_cancelled,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": [{\"expire\": true}],"
            " \"init\": [null, {\"drip\": true}]}",
            &o);
    cr_assert_eq(pl_decorator_timeout(&per_call, CALL_MS), PL_OK);
    cJSON *got = echo_calls("r1", 2);
    expect_error(at(got, 0), PL_ERR_TIMEOUT, NULL);
    cr_expect(strstr(first_text(at(got, 1)), "\"i\": 1"), "%s", t_text(got));
    cJSON_Delete(got);
    cr_expect_eq(requests(&g_servers[0], "initialize"), 3);
    cr_expect_eq(requests(&g_servers[0], "tools/call"), 2);
    cr_expect_eq(requests(&g_servers[0], "notifications/cancelled"), 0);
}

/* A notification the server does not take (a status that is no 404) is
 * said, never dropped: notifications/initialized refused fails the
 * registration, or the call that began a new session (the next call
 * begins one that works); notifications/cancelled refused is named in
 * the Timeout's message. */
Test(mcp_http, a_notification_not_taken_is_reported, .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    cr_expect_eq(register_on("{\"notify\": [{\"status\": 500}]}", &o), PL_EIO);
    cr_expect(strstr(pl_errmsg(), "notifications/initialized: HTTP 500"), "%s",
              pl_errmsg());
    cr_expect_null(F.mcp);
    close_all();
    stop_servers();
    o.timeout_ms = CALL_MS;
    open_on("{\"call\": [{\"expire\": true}, {\"forever\": true,"
            " \"sse\": true}], \"notify\": [null, {\"status\": 503},"
            " null, {\"status\": 400}]}",
            &o);
    cJSON *got = echo_calls("r1", 3);
    expect_error(at(got, 0), PL_ERR_RETRYABLE_SERVER,
                 "notifications/initialized: HTTP 503");
    expect_error(at(got, 1), PL_ERR_TIMEOUT,
                 "notifications/cancelled was not taken: HTTP 400");
    cr_expect(strstr(first_text(at(got, 2)), "\"i\": 2"), "%s", t_text(got));
    cJSON_Delete(got);
    cr_expect_eq(requests(&g_servers[0], "initialize"), 3);
}

/* A session the server ended (404) is ended by the client too: a DELETE
 * of it, with the token, before the new one begins; the last is ended at
 * close. */
Test(mcp_http, an_expired_session_is_deleted_before_a_new_one,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": [{\"expire\": true}]}", &o);
    cJSON *got = echo_calls("r1", 1);
    cr_expect(strstr(first_text(at(got, 0)), "\"i\": 0"), "%s", t_text(got));
    cJSON_Delete(got);
    deleted_before(&g_servers[0], "s-1", 1);
    cr_expect_eq(requests(&g_servers[0], "DELETE"), 1);
    close_all();
    deleted_before(&g_servers[0], "s-2", -1);
    cr_expect_eq(requests(&g_servers[0], "DELETE"), 2);
}

/* A session left after a transport error (an answer that is not one) is
 * ended with a DELETE before the next call begins a new one. */
Test(mcp_http, a_session_left_after_an_error_is_deleted, .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": [{\"content_type\": \"text/html\", "
            "\"body\": \"<html></html>\"}]}",
            &o);
    cJSON *got = echo_calls("r1", 2);
    expect_error(at(got, 0), PL_ERR_TOOL_BUG, "text/html");
    cr_expect(strstr(first_text(at(got, 1)), "\"i\": 1"), "%s", t_text(got));
    cJSON_Delete(got);
    cr_expect_eq(requests(&g_servers[0], "initialize"), 2);
    deleted_before(&g_servers[0], "s-1", 1);
}

/* A server that lets no client end a session (405 to DELETE) changes
 * nothing for the caller: the calls go on in the new session, and close
 * is as quiet. */
Test(mcp_http, a_server_refusing_delete_changes_nothing, .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"delete\": [{\"status\": 405}, {\"status\": 405}],"
            " \"call\": [{\"expire\": true}]}",
            &o);
    cJSON *got = echo_calls("r1", 2);
    all_echoed(got, 2);
    cJSON_Delete(got);
    deleted_before(&g_servers[0], "s-1", 1);
    close_all();
    cr_expect_eq(requests(&g_servers[0], "DELETE"), 2);
    cr_expect_eq(requests(&g_servers[0], "initialize"), 2);
}

/* ------------------------------------------------------------------------ */
/* Bodies                                                                   */
/* ------------------------------------------------------------------------ */

Test(mcp_http, a_content_type_that_lies_is_a_clear_error, .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": ["
            "{\"sse\": true, \"content_type\": \"application/json\"},"
            "{\"content_type\": \"text/event-stream\"},"
            "{\"content_type\": \"text/html\", \"body\": \"<html></html>\"},"
            "{\"status\": 202, \"body\": \"\"},"
            "{\"sse\": true, \"content_type\": null}]}",
            &o);
    cJSON *got = echo_calls("r1", 6);
    expect_error(at(got, 0), PL_ERR_TOOL_BUG,
                 "Content-Type application/json) is not the answer");
    expect_error(at(got, 1), PL_ERR_RETRYABLE_SERVER,
                 "the event stream ended without the answer");
    expect_error(at(got, 2), PL_ERR_TOOL_BUG, "text/html");
    expect_error(at(got, 3), PL_ERR_TOOL_BUG, "HTTP 202");
    expect_error(at(got, 4), PL_ERR_TOOL_BUG, "Content-Type none");
    cr_expect(strstr(first_text(at(got, 5)), "\"i\": 5"), "%s", t_text(got));
    cJSON_Delete(got);
}

/* gzip is asked for and read; a gzip bomb costs max_message_bytes. */
Test(mcp_http, a_gzip_body_is_read_and_a_gzip_bomb_is_cut,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": [{\"gzip\": true}, {\"gzip\": true, \"sse\": true},"
            " {\"gzip_bomb\": 268435456}, {\"body\": \"not gzip\","
            " \"headers\": [[\"Content-Encoding\", \"gzip\"]]}]}",
            &o);
    cJSON *got = echo_calls("r1", 4);
    cr_expect(strstr(first_text(at(got, 0)), "\"i\": 0"), "%s", t_text(got));
    cr_expect(strstr(first_text(at(got, 1)), "\"i\": 1"), "%s", t_text(got));
    expect_error(at(got, 2), PL_ERR_TOOL_BUG, "longer than 4194304 bytes");
    expect_error(at(got, 3), PL_ERR_TOOL_BUG, "does not decode");
    cJSON_Delete(got);
    cJSON *l = log_of(&g_servers[0]);
    const char *ae = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(l, 0), "accept_encoding"));
    cr_expect(ae && strstr(ae, "gzip"), "%s", t_text(l));
    cJSON_Delete(l);
}

/* A stream of comments that never brings the answer, and a JSON body
 * that never ends, end at the call's deadline (the timeout decorator's),
 * well before the handle's own 30 s. */
Test(mcp_http, an_answer_that_never_ends_stops_at_the_deadline,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": [{\"forever\": true, \"sse\": true},"
            " {\"drip\": true}]}",
            &o);
    cr_assert_eq(pl_decorator_timeout(&per_call, CALL_MS), PL_OK);
    cJSON *got = echo_calls("r1", 3);
    /* the call's own Timeout, or the decorator's, when the call came
     * back a few ms past the deadline */
    expect_error(at(got, 0), PL_ERR_TIMEOUT, NULL);
    expect_error(at(got, 1), PL_ERR_TIMEOUT, NULL);
    cr_expect(strstr(first_text(at(got, 2)), "\"i\": 2"), "%s", t_text(got));
    cJSON_Delete(got);
}

/* An event stream that goes on after the answer is left once the answer
 * has come: the call succeeds, well before its timeout. */
Test(mcp_http, an_event_stream_is_left_once_the_answer_came,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    o.timeout_ms = 10000;
    open_on("{\"call\": [{\"forever\": true, \"sse\": true, "
            "\"answer_first\": true}]}",
            &o);
    cJSON *got = echo_calls("r1", 2);
    all_echoed(got, 2);
    cJSON_Delete(got);
}

/* notifications/tools/list_changed on an answer's event stream: the next
 * call lists the tools again, the one after does not. */
Test(mcp_http, a_list_changed_on_an_event_stream_lists_the_tools_again,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": [{\"sse\": true, \"list_changed\": true}]}", &o);
    cJSON *got = echo_calls("r1", 3);
    all_echoed(got, 3);
    cJSON_Delete(got);
    cJSON *l = log_of(&g_servers[0]);
    int call = 0, lists = 0, lists_before[3] = {0};
    const cJSON *e;
    cJSON_ArrayForEach(e, l)
    {
        const char *m = s_of(e, "method");
        lists += strcmp(m, "tools/list") == 0;
        if (strcmp(m, "tools/call") == 0 && call < 3)
            lists_before[call++] = lists;
    }
    cJSON_Delete(l);
    cr_expect_eq(lists_before[0], 1, "registration's");
    cr_expect_eq(lists_before[1], 2, "listed again after the notification");
    cr_expect_eq(lists_before[2], 2, "and not again");
}

static long max_rss_kb(void)
{
    struct rusage u;
    cr_assert_eq(getrusage(RUSAGE_SELF, &u), 0);
    return u.ru_maxrss;
}

/* 50 MB of headers: an error, and no 50 MB kept of them. */
Test(mcp_http, a_50_MB_header_block_is_an_error_not_50_MB_kept,
     .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": [{\"header_flood\": 52428800}]}", &o);
    long before = max_rss_kb();
    cJSON *got = echo_calls("r1", 2);
    long grew = max_rss_kb() - before;
    expect_error(at(got, 0), PL_ERR_TOOL_BUG, "bytes of headers");
    cr_expect(strstr(first_text(at(got, 1)), "\"i\": 1"), "%s", t_text(got));
    cr_expect_lt(grew, 40 * 1024, "the process grew %ld KiB", grew);
    cJSON_Delete(got);
}

/* An answer whose JSON escapes a lone UTF-16 surrogate (a string cut
 * inside a pair) is read with U+FFFD in its place, from a JSON body and
 * from an event stream: it was taken for a body that is not the answer
 * (ToolBug), or an event stream without it (RetryableServer). */
Test(mcp_http, an_answer_with_a_lone_surrogate_is_read, .fini = teardown_http)
{
    pl_mcp_options o = quiet();
    open_on("{\"call\": [{\"body\": \"{\\\"jsonrpc\\\": \\\"2.0\\\", \\\""
            "id\\\": 3, \\\"result\\\": {\\\"content\\\": [{\\\"type\\\":"
            " \\\"text\\\", \\\"text\\\": \\\"cut \\\\ud83d\\\"}]}}\"}, {"
            "\"sse\": true, \"body\": \"data: {\\\"jsonrpc\\\": \\\"2.0\\"
            "\", \\\"id\\\": 4, \\\"result\\\": {\\\"content\\\": [{\\\"t"
            "ype\\\": \\\"text\\\", \\\"text\\\": \\\"\\\\udc00 low\\\"}]"
            "}}\\n\\n\"}]}",
            &o);
    cJSON *got = echo_calls("r1", 2);
    cr_expect_str_eq(first_text(at(got, 0)), "cut \ufffd");
    cr_expect_str_eq(first_text(at(got, 1)), "\ufffd low");
    cJSON_Delete(got);
}

/* ledger-replay --mcp-token-env NAME=VAR: a server that wants its bearer
 * token (401 without it) is given VAR's value, at every request of every
 * command, and the store never holds it; without the flag the server
 * cannot be registered (exit 2).  A flag that names no --mcp server, a
 * variable that is not set or no variable's name, a stdio-only flag for
 * an HTTP server, or the flag twice: a usage error (exit 1), before the
 * server or the store is touched. */
Test(mcp_http, ledger_replay_sends_the_token_its_flag_names,
     .fini = teardown_http)
{
    t_lmdb_only("ledger-replay opens the store by its path");
    scripted *s = start_scripted(0, "127.0.0.1", "{\"require_token\": true}");
    snprintf(F.store, sizeof F.store, "%s", t_store_path());
    char spec[200];
    snprintf(spec, sizeof spec, "h=%s", s->url);
    const char *tok = "h=PL_TEST_MCP_TOKEN";
    const char *submit[] = {F.store,           "--mcp",     spec,
                            "--mcp-token-env", tok,         "--submit",
                            "h.echo",          "--payload", "{\"x\": 7}",
                            "--new-id",        "t1",        NULL};
    cr_assert_eq(replay_tool(submit), 0);
    const char *run_it[] = {F.store, "--mcp", spec, "--mcp-token-env",
                            tok,     "--run", "t1", NULL};
    cr_assert_eq(replay_tool(run_it), 0);
    cr_expect_eq(requests(s, "tools/call"), 1);
    cJSON *l = log_of(s);
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, l)
    {
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "auth_ok")),
                  "%s", t_text(e));
        n++;
    }
    cJSON_Delete(l);
    cr_expect_geq(n, 6); /* two initialize, tools/list, the call, ... */
    /* the run's result is the echo, and nothing of the token is stored */
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    F.engine = t_engine(F.store, F.reg, PL_DURABILITY_PROCESS);
    pl_steps *steps = NULL;
    cr_assert_eq(pl_run_ledger(&steps, F.engine, "t1", "0"), PL_OK, "%s",
                 pl_errmsg());
    const pl_step *last = pl_steps_at(steps, pl_steps_count(steps) - 1);
    cr_expect(strstr(first_text(pl_step_payload(last)), "7"), "%s",
              t_text(pl_step_payload(last)));
    pl_steps_free(steps);
    pl_engine_close(F.engine);
    F.engine = NULL;
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "grep -rqa '%s' '%s'", TOKEN, F.store);
    cr_expect_neq(system(cmd), 0, "the token is in the store");
    /* without it, the server refuses the registration */
    const char *none[] = {F.store, "--mcp", spec, "--check", NULL};
    cr_expect_eq(replay_tool(none), 2);
    int before = requests(s, "initialize");
    const char *const bad[][12] = {
        {F.store, "--mcp", spec, "--mcp-token-env", "g=PL_TEST_MCP_TOKEN",
         "--check", NULL},
        {F.store, "--mcp", spec, "--mcp-token-env", "h=PL_TEST_NOT_SET",
         "--check", NULL},
        {F.store, "--mcp", spec, "--mcp-token-env", "h=1X", "--check", NULL},
        {F.store, "--mcp", spec, "--mcp-token-env", "h=", "--check", NULL},
        {F.store, "--mcp", spec, "--mcp-token-env", "PL_TEST_MCP_TOKEN",
         "--check", NULL},
        {F.store, "--mcp", spec, "--mcp-token-env", tok, "--mcp-token-env", tok,
         "--check", NULL},
        {F.store, "--mcp", spec, "--mcp-env", "h=PL_TEST_MCP_TOKEN", "--check",
         NULL},
        {F.store, "--mcp", spec, "--mcp", spec, "--check", NULL},
        {F.store, "--mcp", spec, "--mcp-token-env", NULL},
    };
    unsetenv("PL_TEST_NOT_SET");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(replay_tool(bad[i]), 1, "case %zu", i);
    cr_expect_eq(requests(s, "initialize"), before, "a bad flag reached it");
}
