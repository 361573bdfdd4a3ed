/*
 * test_paginate.c -- the paginate decorator (core/ext/decorator_paginate.c):
 * every page a recorded call, the page limit, the byte cap, errors, retry
 * per page, a model's tool calls, and a crash after page N.
 *
 * The tool "pages" serves a result set of payload.total pages of
 * payload.per items each.  Every execution appends its page number to an
 * effects file, a line each, outside the engine: the file says which pages
 * really ran, in any process.
 */
#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pl_decorator g_decos[4];
static size_t g_n_decos;
static char g_fx[4400]; /* the effects file */
static int g_kill_page; /* SIGKILL when this page starts; 0 never */

static const cJSON *member(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static double num(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = member(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = member(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* How many times page @p page ran (0: all pages). */
static int ran(int page)
{
    FILE *f = fopen(g_fx, "r");
    if (!f)
        return 0;
    int n = 0, p;
    while (fscanf(f, "%d", &p) == 1)
        n += page == 0 || p == page;
    fclose(f);
    return n;
}

/*
 * pages: {"total": T, "per": K, "page_token": "tN" | "page": N,
 *         "mode": "number", "fail_page": P, "fail_times": F, "code": C,
 *         "item_bytes": B, "repeat": true, "bad_items_page": P,
 *         "back_to": K}
 * Page N (1-based) has items "N.1" .. "N.K" (padded to B bytes), and
 * "next_token": "tN+1" (or with mode "number", "next_page": N+1) while
 * N < T; with "back_to", the last page's is "tK", a loop.  With "nest":
 * true the items are at /data/0/items.
 */
static int pages(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *p = a->payload;
    bool number = str(p, "mode") && strcmp(str(p, "mode"), "number") == 0;
    int page = 1;
    if (number)
        page = (int)num(p, "page", 1);
    else if (str(p, "page_token"))
        page = (int)strtol(str(p, "page_token") + 1, NULL, 10);
    if (g_kill_page && page == g_kill_page)
        raise(SIGKILL);
    FILE *f = fopen(g_fx, "a");
    cr_assert_not_null(f);
    fprintf(f, "%d\n", page);
    fclose(f);
    /* the attempt, from this invocation's ledger (retry runs attempts in
     * it) */
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    int attempt = 1;
    for (size_t i = 0; i < pl_steps_count(l); i++)
        attempt += pl_step_type_of(pl_steps_at(l, i)) == PL_STEP_ACTION_RESULT;
    if (page == (int)num(p, "fail_page", 0) &&
        attempt <= (int)num(p, "fail_times", 1))
        return pl_steps_add_error(out,
                                  str(p, "code") ? str(p, "code")
                                                 : PL_ERR_RETRYABLE_SERVER,
                                  "page failed");
    int total = (int)num(p, "total", 1), per = (int)num(p, "per", 2);
    int ib = (int)num(p, "item_bytes", 0);
    cJSON *r = cJSON_CreateObject();
    cJSON *items = cJSON_AddArrayToObject(r, "items");
    for (int i = 1; i <= per; i++) {
        char buf[4096];
        int n = snprintf(buf, sizeof buf, "%d.%d", page, i);
        while (n < ib && n < (int)sizeof buf - 1)
            buf[n++] = '.';
        buf[n] = '\0';
        cJSON_AddItemToArray(items, cJSON_CreateString(buf));
    }
    if (page == (int)num(p, "bad_items_page", 0))
        cJSON_ReplaceItemInObject(r, "items", cJSON_CreateString("oops"));
    if (cJSON_IsTrue(member(p, "nest"))) { /* {"data": [{"items": [...]}]} */
        cJSON *d = cJSON_AddArrayToObject(r, "data"), *o = cJSON_CreateObject();
        cJSON_AddItemToArray(d, o);
        cJSON_AddItemToObject(o, "items",
                              cJSON_DetachItemFromObject(r, "items"));
    }
    cJSON_AddStringToObject(r, "query", "q");
    int back_to = (int)num(p, "back_to", 0); /* the last page's next */
    if (page < total || back_to) {
        char tok[32];
        snprintf(tok, sizeof tok, "t%d",
                 page == total                       ? back_to
                 : cJSON_IsTrue(member(p, "repeat")) ? page
                                                     : page + 1);
        if (number)
            cJSON_AddNumberToObject(r, "next_page", page + 1);
        else
            cJSON_AddStringToObject(r, "next_token", tok);
    }
    st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

/* caller: {"tool": name, "args": {...}} -> the tool's result, through
 * g_decos. */
static int caller(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const cJSON *args = member(a->payload, "args");
    static const char *const allowed[] = {"pages"};
    pl_action c = PL_ACTION_INIT;
    c.policy = str(a->payload, "tool");
    c.actions = allowed;
    c.n_actions = 1;
    c.payload = cJSON_IsObject(args) ? args : pl_json_empty();
    pl_step *res = NULL;
    int st = pl_ctx_call(&res, ctx, &c, g_decos, g_n_decos);
    if (st && st != PL_ERESULT)
        return st;
    st = pl_steps_add_result(out, pl_step_payload(res));
    pl_step_free(res);
    return st;
}

/* agent: a model's stand-in.  Its first turn calls "pages" with the
 * payload's args; the next one answers with the number of items it read. */
static int agent(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    const pl_steps *l = NULL;
    int st = pl_ctx_ledger(&l, ctx);
    if (st)
        return st;
    for (size_t i = pl_steps_count(l); i-- > 0;) {
        const pl_step *s = pl_steps_at(l, i);
        if (pl_step_type_of(s) != PL_STEP_ACTION_RESULT)
            continue;
        int n = cJSON_GetArraySize(member(pl_step_payload(s), "items"));
        char text[64];
        snprintf(text, sizeof text, "read %d items", n);
        return pl_steps_add_text(out, NULL, text);
    }
    return pl_steps_add_call(out, "pages", member(a->payload, "args"));
}

static pl_registry *registry(void)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    struct {
        const char *name;
        pl_policy_fn fn;
    } defs[] = {{"caller", caller}, {"pages", pages}, {"agent", agent}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        cr_assert_eq(pl_registry_add_fn(reg, defs[i].name, defs[i].fn, NULL),
                     PL_OK, "%s", pl_errmsg());
    }
    return reg;
}

static pl_engine *open_engine(const char *store, const pl_registry *reg)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, store, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

static void setup(const char *dir)
{
    snprintf(g_fx, sizeof g_fx, "%s/effects", dir);
}

static pl_outcome *run(pl_engine *e, const char *id, const char *args)
{
    char payload[4096];
    snprintf(payload, sizeof payload, "{\"tool\": \"pages\", \"args\": %s}",
             args);
    pl_outcome *o = t_start(e, "caller", payload, id);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "run: %s",
                 o->reason ? o->reason : "?");
    return o;
}

static void use(const pl_paginate_options *po)
{
    cr_assert_eq(pl_decorator_paginate(&g_decos[0], po), PL_OK, "%s",
                 pl_errmsg());
    g_n_decos = 1;
}

static pl_paginate_options token_opts(void)
{
    pl_paginate_options po = PL_PAGINATE_OPTIONS_INIT;
    po.param = "/page_token";
    po.items = "/items";
    return po;
}

static int count_type(const pl_steps *l, pl_step_type type)
{
    int n = 0;
    for (size_t i = 0; i < pl_steps_count(l); i++)
        n += pl_step_type_of(pl_steps_at(l, i)) == type;
    return n;
}

static const cJSON *pagination(const pl_outcome *o)
{
    const cJSON *p = member(pl_outcome_result(o), "pagination");
    cr_assert(cJSON_IsObject(p), "no pagination in %s",
              t_text(pl_outcome_result(o)));
    return p;
}

/* Continue a completed run: the same result, nothing executes. */
static void expect_replay_still(pl_engine *e, const char *id,
                                const pl_outcome *first)
{
    int before = ran(0);
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s", pl_errmsg());
    char *a = t_text(pl_outcome_result(o)),
         *b = t_text(pl_outcome_result(first));
    cr_expect_str_eq(a, b);
    free(a);
    free(b);
    cr_expect_eq(o->calls_executed, 0);
    cr_expect_eq(ran(0), before, "a replay ran a page");
    pl_outcome_free(o);
}

Test(paginate, reads_every_page_each_a_recorded_call, .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    po = token_opts();
    use(&po);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = run(e, "p", "{\"total\": 5, \"per\": 3}");
    const cJSON *r = pl_outcome_result(o);
    const cJSON *items = member(r, "items");
    cr_assert_eq(cJSON_GetArraySize(items), 15, "%s", t_text(r));
    cr_expect_str_eq(cJSON_GetArrayItem(items, 0)->valuestring, "1.1");
    cr_expect_str_eq(cJSON_GetArrayItem(items, 14)->valuestring, "5.3");
    cr_expect_null(member(r, "next_token"), "the continuation is gone");
    cr_expect_str_eq(str(r, "query"), "q", "the first page's other members");
    const cJSON *pg = pagination(o);
    cr_expect_eq(num(pg, "pages", 0), 5);
    cr_expect_eq(num(pg, "merged", 0), 5);
    cr_expect(cJSON_IsTrue(member(pg, "complete")));
    cr_expect_str_eq(str(pg, "stopped"), "end");
    cr_expect_null(member(pg, "next"));
    cr_expect_null(member(pg, "note"));
    for (int p = 1; p <= 5; p++)
        cr_expect_eq(ran(p), 1, "page %d ran %d times", p, ran(p));
    /* each page a call of its own in the call's ledger, then the merge */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "p", "0.0"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(count_type(l, PL_STEP_ACTION_CALL), 5);
    cr_expect_eq(count_type(l, PL_STEP_ACTION_RESULT), 6);
    const pl_step *call2 = pl_steps_at(l, 2);
    cr_expect_str_eq(str(member(pl_step_payload(call2), "payload"),
                         "page_token"),
                     "t2");
    const pl_step *last = pl_steps_at(l, pl_steps_count(l) - 1);
    cr_expect_str_eq(pl_step_actor(last), "paginate");
    pl_steps_free(l);
    cr_expect_eq(pl_run_verify(e, "p"), PL_OK, "%s", pl_errmsg());
    expect_replay_still(e, "p", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(paginate, a_single_page_passes_unchanged, .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    po = token_opts();
    use(&po);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = run(e, "p", "{\"total\": 1, \"per\": 2}");
    char *got = t_text(pl_outcome_result(o));
    cr_expect_str_eq(got, "{\"items\":[\"1.1\",\"1.2\"],\"query\":\"q\"}");
    free(got);
    pl_outcome_free(o);
    /* a first page that fails is the result as it is */
    o = run(e, "f",
            "{\"total\": 3, \"fail_page\": 1, \"fail_times\": 9, "
            "\"code\": \"NotFound\"}");
    cr_expect_str_eq(str(pl_outcome_result(o), "code"), "NotFound");
    cr_expect_null(member(pl_outcome_result(o), "pagination"));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(paginate, the_page_limit_stops_with_a_note_and_the_next, .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    po = token_opts();
    po.max_pages = 3;
    use(&po);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = run(e, "p", "{\"total\": 10, \"per\": 2}");
    cr_expect_eq(cJSON_GetArraySize(member(pl_outcome_result(o), "items")), 6);
    const cJSON *pg = pagination(o);
    cr_expect_eq(num(pg, "pages", 0), 3);
    cr_expect(cJSON_IsFalse(member(pg, "complete")));
    cr_expect_str_eq(str(pg, "stopped"), "page_limit");
    cr_expect_str_eq(str(pg, "next"), "t4", "what reads page 4");
    cr_expect(str(pg, "note") && strstr(str(pg, "note"), "incomplete"));
    cr_expect_eq(ran(4), 0, "page 4 was not read");
    pl_outcome_free(o);
    /* the default limit is 100 */
    static pl_paginate_options dflt;
    dflt = token_opts();
    use(&dflt);
    o = run(e, "d", "{\"total\": 150, \"per\": 1}");
    cr_expect_eq(num(pagination(o), "pages", 0), 100);
    cr_expect_str_eq(str(pagination(o), "next"), "t101");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(paginate, the_byte_cap_stops_before_a_page_that_would_pass_it,
     .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    po = token_opts();
    po.max_bytes = 2500; /* a page's items are about 1,000 bytes */
    use(&po);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = run(e, "p",
                        "{\"total\": 10, \"per\": 2, \"item_bytes\": 500}");
    const cJSON *pg = pagination(o);
    cr_expect_eq(num(pg, "merged", 0), 2);
    cr_expect_eq(num(pg, "pages", 0), 3, "the third was read, not merged");
    cr_expect_str_eq(str(pg, "stopped"), "byte_cap");
    cr_expect_str_eq(str(pg, "next"), "t3", "what reads the unmerged page");
    cr_expect_leq(num(pg, "bytes", 1e9), 2500);
    cr_expect_eq(cJSON_GetArraySize(member(pl_outcome_result(o), "items")), 4);
    cr_expect_eq(ran(3), 1);
    cr_expect_eq(ran(4), 0);
    pl_outcome_free(o);
    /* going on from "next" reads the rest */
    o = run(e, "q",
            "{\"total\": 4, \"per\": 2, \"item_bytes\": 500, "
            "\"page_token\": \"t3\"}");
    cr_expect_eq(cJSON_GetArraySize(member(pl_outcome_result(o), "items")), 4);
    cr_expect(cJSON_IsTrue(member(pagination(o), "complete")));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int g_counted;

/* A decorator that counts the calls through it. */
static int counter(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                   const pl_decorator *self, pl_next *next)
{
    (void)self;
    g_counted++;
    return pl_next_call(next, ctx, a, out);
}

/*
 * decorators.h and the guide: paginate ends its chain, so a decorator after
 * it in the list never runs, while one given as per_page runs for each
 * page; the first page is merged even when it alone passes max_bytes, and
 * max_bytes is 512000 by default.
 */
Test(paginate, it_ends_its_chain_and_merges_the_first_page_always,
     .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    static pl_decorator count = PL_DECORATOR_INIT;
    count.fn = counter;
    count.name = "counter";
    po = token_opts();
    use(&po);
    g_decos[1] = count;
    g_n_decos = 2;
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    g_counted = 0;
    pl_outcome *o = run(e, "after", "{\"total\": 3, \"per\": 1}");
    cr_expect_eq(num(pagination(o), "pages", 0), 3);
    cr_expect_eq(num(pagination(o), "max_bytes", 0), 512000);
    cr_expect_eq(g_counted, 0, "a decorator after paginate ran");
    pl_outcome_free(o);

    po.per_page = &count;
    po.n_per_page = 1;
    use(&po);
    o = run(e, "per", "{\"total\": 3, \"per\": 1}");
    cr_expect_eq(num(pagination(o), "pages", 0), 3);
    cr_expect_eq(g_counted, 3, "per_page runs once a page");
    pl_outcome_free(o);

    po = token_opts();
    po.max_bytes = 100; /* less than one page's items */
    use(&po);
    o = run(e, "big", "{\"total\": 3, \"per\": 2, \"item_bytes\": 500}");
    const cJSON *pg = pagination(o);
    cr_expect_eq(num(pg, "merged", 0), 1, "the first page is merged");
    cr_expect_eq(num(pg, "pages", 0), 1, "the cap is reached: no page more");
    cr_expect_str_eq(str(pg, "next"), "t2");
    cr_expect_str_eq(str(pg, "stopped"), "byte_cap");
    cr_expect_eq(cJSON_GetArraySize(member(pl_outcome_result(o), "items")), 2);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(paginate, page_numbers_and_whole_pages, .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    po = (pl_paginate_options)PL_PAGINATE_OPTIONS_INIT;
    po.next = "/next_page";
    po.param = "/opts/page"; /* made on the way */
    use(&po);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    /* the tool reads "page" at the top: a param elsewhere never reaches
     * it, so it returns page 1 again: a repeated continuation */
    pl_outcome *o = run(e, "p", "{\"total\": 3, \"mode\": \"number\"}");
    cr_expect_str_eq(str(pagination(o), "stopped"), "repeated_continuation");
    cr_expect_eq(num(pagination(o), "pages", 0), 2);
    pl_outcome_free(o);
    /* a request (a model's arguments) with no room for the continuation
     * ends the reading as a failed page does, not the run */
    o = run(e, "r", "{\"total\": 3, \"mode\": \"number\", \"opts\": 5}");
    cr_expect_str_eq(str(pagination(o), "stopped"), "error");
    cr_expect_eq(num(pagination(o), "merged", 0), 1);
    cr_expect_str_eq(str(member(pagination(o), "error"), "code"),
                     PL_ERR_INVALID_INPUT, "%s", t_text(pl_outcome_result(o)));
    pl_outcome_free(o);
    po.param = "/page";
    use(&po);
    o = run(e, "q", "{\"total\": 3, \"mode\": \"number\"}");
    const cJSON *results = member(pl_outcome_result(o), "results");
    cr_assert_eq(cJSON_GetArraySize(results), 3, "%s",
                 t_text(pl_outcome_result(o)));
    cr_expect_eq(num(cJSON_GetArrayItem(results, 1), "next_page", 0), 3,
                 "pages are kept whole without an items pointer");
    cr_expect(cJSON_IsTrue(member(pagination(o), "complete")));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A call whose request already holds a continuation (a caller going on,
 * as the note says) and whose page returns that same continuation: the
 * page returned the continuation that asked for it, so the next request
 * would be this one again, and its items merged twice. */
Test(paginate, a_first_page_that_returns_its_own_continuation_stops,
     .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    po = token_opts();
    use(&po);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = run(e, "p",
                        "{\"total\": 5, \"repeat\": true, "
                        "\"page_token\": \"t2\"}");
    const cJSON *items = member(pl_outcome_result(o), "items");
    cr_expect_eq(cJSON_GetArraySize(items), 2, "%s",
                 t_text(pl_outcome_result(o)));
    const cJSON *pg = pagination(o);
    cr_expect_str_eq(str(pg, "stopped"), "repeated_continuation");
    cr_expect_eq(num(pg, "pages", 0), 1);
    cr_expect_eq(num(pg, "merged", 0), 1);
    cr_expect_str_eq(str(pg, "next"), "t2");
    cr_expect_eq(ran(2), 1, "page 2 was read %d times", ran(2));
    expect_replay_still(e, "p", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A tool that pages in a loop (t2 -> t3 -> t2 ...) is stopped at the
 * first continuation seen before in the call, not read over and over to
 * the page limit with its items merged again each time; the pagination
 * names the continuation. */
Test(paginate, a_continuation_seen_before_in_the_call_stops, .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    po = token_opts();
    po.max_pages = 10;
    use(&po);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = run(e, "loop", "{\"total\": 3, \"back_to\": 2}");
    const cJSON *pg = pagination(o);
    cr_expect_str_eq(str(pg, "stopped"), "repeated_continuation", "%s",
                     t_text(pl_outcome_result(o)));
    cr_expect_eq(num(pg, "pages", 0), 3);
    cr_expect_eq(num(pg, "merged", 0), 3);
    cr_expect(cJSON_IsFalse(member(pg, "complete")));
    cr_expect_str_eq(str(pg, "next"), "t2");
    cr_expect_eq(cJSON_GetArraySize(member(pl_outcome_result(o), "items")), 6,
                 "each page's items once");
    const cJSON *err = member(pg, "error");
    cr_expect(cJSON_IsTrue(member(err, "error")), "%s",
              t_text(pl_outcome_result(o)));
    cr_expect_str_eq(str(err, "code"), PL_ERR_TOOL_BUG);
    const char *msg = str(err, "message");
    cr_expect(msg && strstr(msg, "\"t2\"") && strstr(msg, "loop"), "%s",
              msg ? msg : "(no message)");
    cr_expect_eq(ran(2), 1, "page 2 was read %d times", ran(2));
    cr_expect_eq(ran(0), 3, "%d pages were read", ran(0));
    expect_replay_still(e, "loop", o);
    pl_outcome_free(o);
    /* a continuation the call was asked with counts as seen: t2 asked page
     * 2, page 3 returns t2 */
    o = run(e, "asked",
            "{\"total\": 3, \"back_to\": 2, "
            "\"page_token\": \"t2\"}");
    pg = pagination(o);
    cr_expect_str_eq(str(pg, "stopped"), "repeated_continuation");
    cr_expect_eq(num(pg, "pages", 0), 2);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* RFC 6901: a pointer may go through an array's item; the merged items go
 * where the first page had its own. */
Test(paginate, items_inside_an_array, .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    po = token_opts();
    po.items = "/data/0/items";
    use(&po);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = run(e, "p", "{\"total\": 3, \"per\": 2, \"nest\": true}");
    const cJSON *r = pl_outcome_result(o);
    const cJSON *items = member(cJSON_GetArrayItem(member(r, "data"), 0),
                                "items");
    cr_expect_eq(cJSON_GetArraySize(items), 6, "%s", t_text(r));
    cr_expect(cJSON_IsTrue(member(pagination(o), "complete")));
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(paginate, a_failing_or_malformed_page_ends_it_saying_so, .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    po = token_opts();
    use(&po);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = run(e, "p",
                        "{\"total\": 5, \"fail_page\": 3, \"fail_times\": 9}");
    const cJSON *pg = pagination(o);
    cr_expect_str_eq(str(pg, "stopped"), "error");
    cr_expect_eq(num(pg, "merged", 0), 2);
    cr_expect_str_eq(str(member(pg, "error"), "code"), PL_ERR_RETRYABLE_SERVER);
    cr_expect_str_eq(str(pg, "next"), "t3");
    cr_expect_eq(ran(4), 0);
    pl_outcome_free(o);
    o = run(e, "m", "{\"total\": 5, \"bad_items_page\": 2}");
    cr_expect_str_eq(str(pagination(o), "stopped"), "malformed_page");
    cr_expect_eq(num(pagination(o), "merged", 0), 1);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int no_sleep(int64_t ms, void *user)
{
    (void)ms;
    (void)user;
    return PL_OK;
}

Test(paginate, retry_and_timeout_per_page, .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_retry_options ro;
    ro = (pl_retry_options)PL_RETRY_OPTIONS_INIT;
    ro.sleep = no_sleep;
    static pl_decorator per[2];
    cr_assert_eq(pl_decorator_timeout(&per[0], 60000), PL_OK);
    cr_assert_eq(pl_decorator_retry(&per[1], &ro), PL_OK);
    static pl_paginate_options po;
    po = token_opts();
    po.per_page = per;
    po.n_per_page = 2;
    use(&po);
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = run(e, "p",
                        "{\"total\": 4, \"fail_page\": 2, \"fail_times\": 2}");
    cr_expect(cJSON_IsTrue(member(pagination(o), "complete")), "%s",
              t_text(pl_outcome_result(o)));
    cr_expect_eq(cJSON_GetArraySize(member(pl_outcome_result(o), "items")), 8);
    cr_expect_eq(ran(2), 3, "page 2 took three attempts");
    cr_expect_eq(ran(3), 1);
    expect_replay_still(e, "p", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(paginate, a_models_tool_calls_under_invoke_action_with, .fini = t_cleanup)
{
    setup(t_tmpdir());
    static pl_paginate_options po;
    po = token_opts();
    static pl_decorator per[1];
    cr_assert_eq(pl_decorator_paginate(&per[0], &po), PL_OK);
    cr_assert_eq(pl_decorator_loop(&g_decos[0], 5), PL_OK);
    cr_assert_eq(pl_decorator_invoke_action_with(&g_decos[1], per, 1), PL_OK);
    g_n_decos = 2;
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    /* caller -> agent (loop, invoke_action_with [paginate]) -> pages */
    pl_outcome *o = t_start(e, "caller",
                            "{\"tool\": \"agent\", \"args\": {\"args\": "
                            "{\"total\": 4, \"per\": 2}}}",
                            "a");
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_expect_str_eq(str(pl_outcome_result(o), "text"), "read 8 items");
    cr_expect_eq(ran(0), 4);
    /* the model's call of "pages" ran under paginate: its pages are calls
     * in the tool call's own ledger */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "a", "0.0.0"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(count_type(l, PL_STEP_ACTION_CALL), 4);
    pl_steps_free(l);
    expect_replay_still(e, "a", o);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- crashes ------------------------------------------------------------- */

/* In a forked child: start run "c" and die when page @p kill_page starts. */
static void crash_child(const char *store, int kill_page, const char *args)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        g_kill_page = kill_page;
        pl_registry *reg = registry();
        pl_engine *e = NULL;
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.durability = PL_DURABILITY_PROCESS;
        if (pl_engine_open(&e, store, reg, &o))
            _exit(11);
        char payload[512];
        snprintf(payload, sizeof payload, "{\"tool\": \"pages\", \"args\": %s}",
                 args);
        cJSON *p = cJSON_Parse(payload);
        pl_action a = {PL_ACTION_VERSION, "caller", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "c";
        pl_outcome *out = NULL;
        int st = pl_run_start(&out, e, &a, &ro);
        _exit(st ? 12 : 3); /* it should have died before this */
    }
    char when[32];
    snprintf(when, sizeof when, "at page %d", kill_page);
    t_expect_killed(pid, when);
}

Test(paginate_crash, a_crash_after_page_7_reads_only_page_8_on,
     .fini = t_cleanup)
{
    static pl_paginate_options po;
    po = token_opts();
    use(&po);
    pl_registry *reg = registry();
    const char *args = "{\"total\": 10, \"per\": 2}";
    /* a crash when each page starts, every page before it durable */
    for (int k = 2; k <= 10; k++) {
        char dir[4200], store[4400];
        snprintf(dir, sizeof dir, "%s", t_tmpdir());
        t_store_in(store, sizeof store, dir, "store.db");
        setup(dir);
        crash_child(store, k, args);
        for (int p = 1; p < k; p++)
            cr_assert_eq(ran(p), 1, "before the crash at %d: page %d ran %d", k,
                         p, ran(p));
        cr_assert_eq(ran(0), k - 1);
        pl_engine *e = open_engine(store, reg);
        pl_outcome *o = NULL;
        cr_assert_eq(pl_run_continue(&o, e, "c", NULL), PL_OK, "%s",
                     pl_errmsg());
        cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s",
                     o->reason ? o->reason : "");
        cr_expect_eq(cJSON_GetArraySize(member(pl_outcome_result(o), "items")),
                     20);
        cr_expect(cJSON_IsTrue(member(pagination(o), "complete")));
        for (int p = 1; p <= 10; p++)
            cr_expect_eq(ran(p), 1, "crash at %d: page %d ran %d times", k, p,
                         ran(p));
        /* pages k..10, and the call that runs paginate */
        cr_expect_eq(o->calls_executed, (uint64_t)(10 - k + 1) + 1,
                     "crash at %d: %llu calls executed", k,
                     (unsigned long long)o->calls_executed);
        cr_expect_eq(pl_run_verify(e, "c"), PL_OK, "%s", pl_errmsg());
        pl_outcome_free(o);
        pl_engine_close(e);
    }
    pl_registry_free(reg);
}

/* ---- configuration ------------------------------------------------------- */

Test(paginate, bad_configurations, .fini = t_cleanup)
{
    pl_decorator d;
    cr_expect_eq(pl_decorator_paginate(NULL, NULL), PL_EINVAL);
    cr_expect_eq(pl_decorator_paginate(&d, NULL), PL_OK, "the defaults");
    pl_paginate_options po = PL_PAGINATE_OPTIONS_INIT;
    po.version = 99;
    cr_expect_eq(pl_decorator_paginate(&d, &po), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "version"), "%s", pl_errmsg());
    const char *bad[] = {"", "next_token", "/a~2b", NULL};
    for (size_t i = 0; i < 4; i++) {
        po = (pl_paginate_options)PL_PAGINATE_OPTIONS_INIT;
        po.next = bad[i];
        cr_expect_eq(pl_decorator_paginate(&d, &po), PL_EINVAL, "next '%s'",
                     bad[i] ? bad[i] : "(null)");
        cr_expect(strstr(pl_errmsg(), "next"), "%s", pl_errmsg());
    }
    po = (pl_paginate_options)PL_PAGINATE_OPTIONS_INIT;
    po.items = "items";
    cr_expect_eq(pl_decorator_paginate(&d, &po), PL_EINVAL);
    po = (pl_paginate_options)PL_PAGINATE_OPTIONS_INIT;
    po.param = "x";
    cr_expect_eq(pl_decorator_paginate(&d, &po), PL_EINVAL);
    po = (pl_paginate_options)PL_PAGINATE_OPTIONS_INIT;
    po.n_per_page = 1;
    cr_expect_eq(pl_decorator_paginate(&d, &po), PL_EINVAL);
    pl_decorator empty = PL_DECORATOR_INIT;
    po.per_page = &empty;
    cr_expect_eq(pl_decorator_paginate(&d, &po), PL_EINVAL);
    cr_expect(strstr(pl_errmsg(), "per-page"), "%s", pl_errmsg());
    po.n_per_page = 0;
    po.next = "/a~1b/c~0d";
    cr_expect_eq(pl_decorator_paginate(&d, &po), PL_OK, "escapes are fine");

    /* a decorator changed by hand after its creation fails the run */
    setup(t_tmpdir());
    static pl_paginate_options later;
    later = token_opts();
    use(&later);
    later.items = "no slash";
    pl_registry *reg = registry();
    pl_engine *e = open_engine(t_store_path(), reg);
    pl_outcome *o = t_start(e, "caller",
                            "{\"tool\": \"pages\", \"args\": {\"total\": 2}}",
                            "b");
    cr_expect_eq(o->status, PL_RUN_FAILED);
    cr_expect_eq(o->error, PL_EINVAL);
    cr_expect(o->reason && strstr(o->reason, "items"), "%s",
              o->reason ? o->reason : "");
    cr_expect_eq(ran(0), 0, "nothing ran");
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}
