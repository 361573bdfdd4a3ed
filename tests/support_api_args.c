/*
 * support_api_args.c -- what test_api_args*.c share: running a table of
 * rows, and the fixture.
 */
#define _GNU_SOURCE /* strcasestr */
#include "support_api_args.h"

#include <stdio.h>
#include <string.h>

void run_rows(fx *f, const row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const row *r = &rows[i];
        memset(&f->out, 0xA5, sizeof f->out);
        pl_errorf(PL_OK, "(no message)");
        fprintf(stderr, "api_args: %s\n", r->call); /* named if it crashes */
        uint64_t mark = 0, mark_after = 0;
        if (f->e)
            cr_assert_eq(pl_engine_change_mark(&mark, f->e), PL_OK);
        int st = r->fn(f);
        if (f->e) {
            char msg_[512];
            snprintf(msg_, sizeof msg_, "%s", pl_errmsg());
            cr_assert_eq(pl_engine_change_mark(&mark_after, f->e), PL_OK);
            cr_expect_eq(mark, mark_after, "%s wrote to the store", r->call);
            pl_errorf(st, "%s", msg_);
        }
        const char *msg = pl_errmsg();
        cr_expect_eq(st, r->want, "%s: %s, want %s (%s)", r->call,
                     pl_status_name(st), pl_status_name(r->want), msg);
        if (st != PL_OK && r->word)
            cr_expect(strcasestr(msg, r->word) != NULL,
                      "%s: the message does not name \"%s\": %s", r->call,
                      r->word, msg);
        if (r->out == OUT_ZERO)
            cr_expect(f->out.u64 == 0, "%s: out-parameter left 0x%llx", r->call,
                      (unsigned long long)f->out.u64);
        if (st == PL_OK) { /* a row meant to fail that did not: free it */
            if (r->out == OUT_ZERO)
                memset(&f->out, 0, sizeof f->out);
        }
    }
}

const char *g_store;

void fx_names(fx *f)
{
    memset(f->long_id, 'r', PL_MAX_RUN_ID + 1);
    f->long_id[PL_MAX_RUN_ID + 1] = '\0';
    memset(f->long_name, 'p', PL_MAX_NAME + 1);
    f->long_name[PL_MAX_NAME + 1] = '\0';
    memset(f->long_reason, 'w', sizeof f->long_reason - 1);
    f->long_reason[sizeof f->long_reason - 1] = '\0';
    f->obj = pl_json_empty();
    f->arr = cJSON_CreateArray();
}

void fx_open(fx *f)
{
    memset(f, 0, sizeof *f);
    fx_names(f);
    f->reg = t_registry();
    g_store = t_store_path();
    f->e = t_engine(g_store, f->reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(f->e, "echo", "{\"x\":1}", "done"));
}

static int count_visit(const pl_run_info *info, void *user)
{
    (void)info;
    ++*(size_t *)user;
    return 0;
}

/* The store holds what fx_open() left: one run, no schedule. */
static void fx_check_store(fx *f)
{
    pl_engine_close(f->e);
    f->e = t_engine(g_store, f->reg, PL_DURABILITY_SYNC);
    size_t runs = 0;
    cr_assert_eq(pl_engine_runs(f->e, count_visit, &runs), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(runs, 1, "the store holds %zu runs after the bad calls", runs);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, f->e, 0), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(cJSON_GetArraySize(list), 0, "a schedule was written");
    cJSON_Delete(list);
    cr_expect_eq(pl_run_verify(f->e, "done"), PL_OK, "%s", pl_errmsg());
}

void fx_close(fx *f)
{
    pl_engine_close(f->e);
    pl_registry_free(f->reg);
    cJSON_Delete(f->arr);
    t_cleanup();
}

void run_on_a_store(const row *rows, size_t n)
{
    fx f;
    fx_open(&f);
    run_rows(&f, rows, n);
    fx_check_store(&f);
    fx_close(&f);
}
