/*
 * test_api_args.c -- every public function given each bad argument its
 * signature allows: NULL for each pointer, "" and over-long names, names
 * that are not UTF-8, ids holding a control character, negative and huge
 * sizes and durations, versioned structs of a wrong version, payloads that
 * are not JSON objects.  Each row of the tables below is one call and what
 * its header promises for it: the status, a message naming the argument,
 * the out-parameter left NULL (or 0), and, for the calls on an engine,
 * nothing written to the store (its change mark unmoved, and reopened, it
 * holds what it held before).
 */
#define _GNU_SOURCE /* strcasestr */
#include "support.h"

#include <policyledger_llm.h>
#include <policyledger_mcp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What a row's call is given: an engine on a store holding one completed
 * run ("done"), a registry, bad names and payloads, and an out-parameter
 * of every type, set to garbage before each call. */
typedef struct fx {
    pl_engine *e;
    pl_registry *reg;
    const cJSON *obj;   /* {} */
    cJSON *arr;         /* [] : not an object */
    char long_id[PL_MAX_RUN_ID + 2];   /* one byte too long */
    char long_name[PL_MAX_NAME + 2];   /* one byte too long */
    char long_reason[4098];            /* a cancel's reason, too long */
    union {             /* the out-parameter, whatever its type */
        void *p;
        pl_engine *eng;
        pl_outcome *outcome;
        pl_run_info *info;
        pl_steps *steps;
        cJSON *json;
        char *str;
        pl_registry *reg;
        pl_schema *schema;
        pl_sandbox *sb;
        pl_tools *tools;
        pl_trace *trace;
        pl_pool *pool;
        pl_schema_cache *cache;
        pl_mcp *mcp;
        uint64_t u64;
        int64_t i64;
        size_t size;
        int fd;
        pl_durability dur;
        pl_step_type type;
        uint8_t hash[PL_HASH_LEN];
    } out;
} fx;

/* What a failing call leaves in its out-parameter. */
enum out_rule {
    OUT_ANY,  /* no out-parameter, or none promised */
    OUT_ZERO, /* NULL, or 0 */
};

typedef struct row {
    const char *call; /* the call, as written in the table */
    int want;         /* the status its header gives */
    const char *word; /* what pl_errmsg() must name: the argument */
    enum out_rule out;
    int (*fn)(fx *f);
} row;

/* A table is an X-macro of rows X(id, status, word, out rule, call); the
 * call reads the fixture through `f`. */
#define ROW_FN(id, want, word, out, call)                                      \
    static int row_##id(fx *f)                                                 \
    {                                                                          \
        (void)f;                                                               \
        return (call);                                                         \
    }
#define ROW_ENTRY(id, want, word, out, call) {#call, want, word, out, row_##id},

/* Run each row, checking what its header promises. */
static void run_rows(fx *f, const row *rows, size_t n)
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
            cr_expect(f->out.u64 == 0, "%s: out-parameter left 0x%llx",
                      r->call, (unsigned long long)f->out.u64);
        if (st == PL_OK) { /* a row meant to fail that did not: free it */
            if (r->out == OUT_ZERO)
                memset(&f->out, 0, sizeof f->out);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The fixture                                                              */
/* ------------------------------------------------------------------------ */

static const char *g_store;

static void fx_names(fx *f)
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

static void fx_open(fx *f)
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
    cr_assert_eq(pl_engine_runs(f->e, count_visit, &runs),
                 PL_OK, "%s", pl_errmsg());
    cr_expect_eq(runs, 1, "the store holds %zu runs after the bad calls",
                 runs);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, f->e, 0), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(cJSON_GetArraySize(list), 0, "a schedule was written");
    cJSON_Delete(list);
    cr_expect_eq(pl_run_verify(f->e, "done"), PL_OK, "%s", pl_errmsg());
}

static void fx_close(fx *f)
{
    pl_engine_close(f->e);
    pl_registry_free(f->reg);
    cJSON_Delete(f->arr);
    t_cleanup();
}

#define RUN_TABLE(f, TABLE)                                                    \
    do {                                                                       \
        static const row rows_[] = {TABLE(ROW_ENTRY)};                         \
        run_rows(f, rows_, sizeof rows_ / sizeof rows_[0]);                    \
    } while (0)

TestSuite(api_args, .timeout = 120);

/* ------------------------------------------------------------------------ */
/* The engine: opening it, runs, their ledgers, export, deletion            */
/* ------------------------------------------------------------------------ */

/* A root action of @p policy with @p payload. */
#define ACT(policy, payload)                                                   \
    (&(pl_action){PL_ACTION_VERSION, (policy), (payload), NULL, 0, NULL})
/* Run options giving run id @p id. */
#define RUN_ID(id)                                                             \
    (&(pl_run_options){PL_RUN_OPTIONS_VERSION, (id), false,                    \
                       PL_IF_EXISTS_FAIL, 0, 0, 0, NULL, 0})
#define RUN_V(v)                                                               \
    (&(pl_run_options){(v), NULL, false, PL_IF_EXISTS_FAIL, 0, 0, 0, NULL, 0})
#define ENGINE_V(v)                                                            \
    (&(pl_engine_options){(v), PL_DURABILITY_SYNC, 0, 0, 0, 0, NULL, NULL,     \
                          false, NULL, 0, false, 0, 0})
#define STATS_V(v) (&(pl_store_stats){(v), 0, 0, 0, 0, 0, 0, 0})
#define RUNS_V(v, after) (&(pl_runs_options){(v), (after), false})
#define PRUNE_V(v) (&(pl_prune_options){(v), 0, 0, 0, false, NULL, NULL})
#define TOMB (&(pl_tombstone){PL_TOMBSTONE_VERSION, 0, 0, {0}, 0, 0, 0, {0}})
#define TOMB_V(v) (&(pl_tombstone){(v), 0, 0, {0}, 0, 0, 0, {0}})

static int visit_run(const pl_run_info *info, void *user)
{
    (void)info;
    (void)user;
    return 0;
}

static int visit_step(const pl_step *step, void *user)
{
    (void)step;
    (void)user;
    return 0;
}

static int visit_line(cJSON *line, void *user)
{
    (void)line;
    (void)user;
    return 0;
}

#define BAD_UTF8 "r\xff\xfe"
#define CTRL_ID "run\x01id"

/* clang-format off */
#define ENGINE_ROWS(X)                                                                     \
    X(open_out, PL_EINVAL, "out", OUT_ANY, pl_engine_open(NULL, g_store, f->reg, NULL))     \
    X(open_path, PL_EINVAL, "path", OUT_ZERO, pl_engine_open(&f->out.eng, NULL, f->reg, NULL)) \
    X(open_empty, PL_EINVAL, "path", OUT_ZERO, pl_engine_open(&f->out.eng, "", f->reg, NULL)) \
    X(open_reg, PL_EINVAL, "registry", OUT_ZERO, pl_engine_open(&f->out.eng, g_store, NULL, NULL)) \
    X(open_v0, PL_EINVAL, "version", OUT_ZERO, pl_engine_open(&f->out.eng, g_store, f->reg, ENGINE_V(0))) \
    X(open_v99, PL_EINVAL, "version", OUT_ZERO, pl_engine_open(&f->out.eng, g_store, f->reg, ENGINE_V(99))) \
    X(open_pg, PL_EINVAL, "postgres", OUT_ZERO, pl_engine_open(&f->out.eng, "postgresql://[::1", f->reg, NULL)) \
    X(stats_out, PL_EINVAL, "out", OUT_ANY, pl_engine_stats(NULL, f->e))                  \
    X(stats_eng, PL_EINVAL, "engine", OUT_ANY, pl_engine_stats(STATS_V(1), NULL))         \
    X(stats_v0, PL_EINVAL, "version", OUT_ANY, pl_engine_stats(STATS_V(0), f->e))         \
    X(stats_v99, PL_EINVAL, "version", OUT_ANY, pl_engine_stats(STATS_V(99), f->e))       \
    X(mark_out, PL_EINVAL, "out", OUT_ANY, pl_engine_change_mark(NULL, f->e))             \
    X(mark_eng, PL_EINVAL, "engine", OUT_ZERO, pl_engine_change_mark(&f->out.u64, NULL))  \
    X(start_out, PL_EINVAL, "out", OUT_ANY, pl_run_start(NULL, f->e, ACT("echo", f->obj), NULL)) \
    X(start_eng, PL_EINVAL, "engine", OUT_ZERO, pl_run_start(&f->out.outcome, NULL, ACT("echo", f->obj), NULL)) \
    X(start_root, PL_EINVAL, "root", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, NULL, NULL)) \
    X(start_policy, PL_EINVAL, "policy", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT(NULL, f->obj), NULL)) \
    X(start_policy_empty, PL_EINVAL, "policy", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT("", f->obj), NULL)) \
    X(start_policy_long, PL_EINVAL, "policy", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT(f->long_name, f->obj), NULL)) \
    X(start_policy_utf8, PL_EINVAL, "policy", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT(BAD_UTF8, f->obj), NULL)) \
    X(start_payload, PL_EINVAL, "payload", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT("echo", NULL), NULL)) \
    X(start_payload_arr, PL_EJSON, "payload", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT("echo", f->arr), NULL)) \
    X(start_action_v0, PL_EINVAL, "version", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, (&(pl_action){0, "echo", f->obj, NULL, 0, NULL}), NULL)) \
    X(start_opts_v0, PL_EINVAL, "version", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT("echo", f->obj), RUN_V(0))) \
    X(start_opts_v99, PL_EINVAL, "version", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT("echo", f->obj), RUN_V(99))) \
    X(start_id_empty, PL_EINVAL, "run id", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT("echo", f->obj), RUN_ID(""))) \
    X(start_id_long, PL_EINVAL, "run id", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT("echo", f->obj), RUN_ID(f->long_id))) \
    X(start_id_ctrl, PL_EINVAL, "run id", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT("echo", f->obj), RUN_ID(CTRL_ID))) \
    X(start_id_utf8, PL_EINVAL, "run id", OUT_ZERO, pl_run_start(&f->out.outcome, f->e, ACT("echo", f->obj), RUN_ID(BAD_UTF8))) \
    X(cont_out, PL_EINVAL, "out", OUT_ANY, pl_run_continue(NULL, f->e, "done", NULL))     \
    X(cont_eng, PL_EINVAL, "engine", OUT_ZERO, pl_run_continue(&f->out.outcome, NULL, "done", NULL)) \
    X(cont_id, PL_EINVAL, "run id", OUT_ZERO, pl_run_continue(&f->out.outcome, f->e, NULL, NULL)) \
    X(cont_id_empty, PL_EINVAL, "run id", OUT_ZERO, pl_run_continue(&f->out.outcome, f->e, "", NULL)) \
    X(cont_id_long, PL_EINVAL, "run id", OUT_ZERO, pl_run_continue(&f->out.outcome, f->e, f->long_id, NULL)) \
    X(cont_id_ctrl, PL_EINVAL, "run id", OUT_ZERO, pl_run_continue(&f->out.outcome, f->e, CTRL_ID, NULL)) \
    X(cont_opts_v0, PL_EINVAL, "version", OUT_ZERO, pl_run_continue(&f->out.outcome, f->e, "done", RUN_V(0))) \
    X(resume_out, PL_EINVAL, "out", OUT_ANY, pl_run_resume(NULL, f->e, "done", "t", f->obj)) \
    X(resume_eng, PL_EINVAL, "engine", OUT_ZERO, pl_run_resume(&f->out.outcome, NULL, "done", "t", f->obj)) \
    X(resume_id, PL_EINVAL, "run id", OUT_ZERO, pl_run_resume(&f->out.outcome, f->e, NULL, "t", f->obj)) \
    X(resume_id_ctrl, PL_EINVAL, "run id", OUT_ZERO, pl_run_resume(&f->out.outcome, f->e, CTRL_ID, "t", f->obj)) \
    X(resume_token, PL_EINVAL, "token", OUT_ZERO, pl_run_resume(&f->out.outcome, f->e, "done", NULL, f->obj)) \
    X(resume_answer, PL_EINVAL, "answer", OUT_ZERO, pl_run_resume(&f->out.outcome, f->e, "done", "t", NULL)) \
    X(resume_answer_arr, PL_EJSON, "answer", OUT_ZERO, pl_run_resume(&f->out.outcome, f->e, "done", "t", f->arr)) \
    X(get_out, PL_EINVAL, "out", OUT_ANY, pl_run_get(NULL, f->e, "done"))                 \
    X(get_eng, PL_EINVAL, "engine", OUT_ZERO, pl_run_get(&f->out.info, NULL, "done"))     \
    X(get_id, PL_EINVAL, "run id", OUT_ZERO, pl_run_get(&f->out.info, f->e, NULL))        \
    X(get_id_empty, PL_EINVAL, "run id", OUT_ZERO, pl_run_get(&f->out.info, f->e, ""))    \
    X(get_id_long, PL_EINVAL, "run id", OUT_ZERO, pl_run_get(&f->out.info, f->e, f->long_id)) \
    X(get_id_ctrl, PL_EINVAL, "run id", OUT_ZERO, pl_run_get(&f->out.info, f->e, CTRL_ID)) \
    X(get_id_utf8, PL_EINVAL, "run id", OUT_ZERO, pl_run_get(&f->out.info, f->e, BAD_UTF8)) \
    X(runs_eng, PL_EINVAL, "engine", OUT_ANY, pl_engine_runs(NULL, visit_run, NULL))      \
    X(runs_visit, PL_EINVAL, "visit", OUT_ANY, pl_engine_runs(f->e, NULL, NULL))          \
    X(runs_from_v0, PL_EINVAL, "version", OUT_ANY, pl_engine_runs_from(f->e, RUNS_V(0, NULL), visit_run, NULL)) \
    X(runs_from_v99, PL_EINVAL, "version", OUT_ANY, pl_engine_runs_from(f->e, RUNS_V(99, NULL), visit_run, NULL)) \
    X(runs_from_after, PL_EINVAL, "cursor", OUT_ANY, pl_engine_runs_from(f->e, RUNS_V(1, f->long_id), visit_run, NULL)) \
    X(ledger_out, PL_EINVAL, "out", OUT_ANY, pl_run_ledger(NULL, f->e, "done", "0"))      \
    X(ledger_eng, PL_EINVAL, "engine", OUT_ZERO, pl_run_ledger(&f->out.steps, NULL, "done", "0")) \
    X(ledger_id, PL_EINVAL, "run id", OUT_ZERO, pl_run_ledger(&f->out.steps, f->e, NULL, "0")) \
    X(ledger_id_ctrl, PL_EINVAL, "run id", OUT_ZERO, pl_run_ledger(&f->out.steps, f->e, CTRL_ID, "0")) \
    X(ledger_path, PL_EINVAL, "path", OUT_ZERO, pl_run_ledger(&f->out.steps, f->e, "done", NULL)) \
    X(ledger_path_bad, PL_EINVAL, "path", OUT_ZERO, pl_run_ledger(&f->out.steps, f->e, "done", "0.x")) \
    X(ledger_path_empty, PL_EINVAL, "path", OUT_ZERO, pl_run_ledger(&f->out.steps, f->e, "done", "")) \
    X(walk_eng, PL_EINVAL, "engine", OUT_ANY, pl_run_walk(NULL, "done", visit_step, NULL)) \
    X(walk_id, PL_EINVAL, "run id", OUT_ANY, pl_run_walk(f->e, NULL, visit_step, NULL))   \
    X(walk_id_ctrl, PL_EINVAL, "run id", OUT_ANY, pl_run_walk(f->e, CTRL_ID, visit_step, NULL)) \
    X(walk_visit, PL_EINVAL, "visit", OUT_ANY, pl_run_walk(f->e, "done", NULL, NULL))     \
    X(walk_from_step, PL_EINVAL, "step", OUT_ANY, pl_run_walk_from(f->e, "done", "0:x", visit_step, NULL)) \
    X(walk_from_step_empty, PL_EINVAL, "step", OUT_ANY, pl_run_walk_from(f->e, "done", "", visit_step, NULL)) \
    X(verify_eng, PL_EINVAL, "engine", OUT_ANY, pl_run_verify(NULL, "done"))              \
    X(verify_id, PL_EINVAL, "run id", OUT_ANY, pl_run_verify(f->e, NULL))                 \
    X(verify_id_ctrl, PL_EINVAL, "run id", OUT_ANY, pl_run_verify(f->e, CTRL_ID))         \
    X(head_out, PL_EINVAL, "out", OUT_ANY, pl_run_head(NULL, f->e, "done"))               \
    X(head_eng, PL_EINVAL, "engine", OUT_ANY, pl_run_head(f->out.hash, NULL, "done"))     \
    X(head_id, PL_EINVAL, "run id", OUT_ANY, pl_run_head(f->out.hash, f->e, NULL))        \
    X(fork_out, PL_EINVAL, "out", OUT_ANY, pl_run_fork(NULL, f->e, "done", "0:1", NULL))  \
    X(fork_eng, PL_EINVAL, "engine", OUT_ZERO, pl_run_fork(&f->out.str, NULL, "done", "0:1", NULL)) \
    X(fork_id, PL_EINVAL, "run id", OUT_ZERO, pl_run_fork(&f->out.str, f->e, NULL, "0:1", NULL)) \
    X(fork_step, PL_EINVAL, "step", OUT_ZERO, pl_run_fork(&f->out.str, f->e, "done", NULL, NULL)) \
    X(fork_step_bad, PL_EINVAL, "step", OUT_ZERO, pl_run_fork(&f->out.str, f->e, "done", "1:1", NULL)) \
    X(fork_step_huge, PL_EINVAL, "step", OUT_ZERO, pl_run_fork(&f->out.str, f->e, "done", "0:99999999999", NULL)) \
    X(fork_new_empty, PL_EINVAL, "id", OUT_ZERO, pl_run_fork(&f->out.str, f->e, "done", "0:1", "")) \
    X(fork_new_ctrl, PL_EINVAL, "id", OUT_ZERO, pl_run_fork(&f->out.str, f->e, "done", "0:1", CTRL_ID)) \
    X(fork_new_long, PL_EINVAL, "id", OUT_ZERO, pl_run_fork(&f->out.str, f->e, "done", "0:1", f->long_id)) \
    X(upgrade_out, PL_EINVAL, "out", OUT_ANY, pl_run_upgrade(NULL, f->e, "done", "0:1", NULL)) \
    X(upgrade_id, PL_EINVAL, "run id", OUT_ZERO, pl_run_upgrade(&f->out.str, f->e, NULL, "0:1", NULL)) \
    X(upgrade_new_ctrl, PL_EINVAL, "id", OUT_ZERO, pl_run_upgrade(&f->out.str, f->e, "done", "0:1", CTRL_ID)) \
    X(export_eng, PL_EINVAL, "engine", OUT_ANY, pl_run_export(NULL, "done", stderr))      \
    X(export_id, PL_EINVAL, "run id", OUT_ANY, pl_run_export(f->e, NULL, stderr))         \
    X(export_file, PL_EINVAL, "stream", OUT_ANY, pl_run_export(f->e, "done", NULL))          \
    X(export_each_visit, PL_EINVAL, "visit", OUT_ANY, pl_run_export_each(f->e, "done", NULL, NULL)) \
    X(export_each_id, PL_EINVAL, "run id", OUT_ANY, pl_run_export_each(f->e, CTRL_ID, visit_line, NULL)) \
    X(import_in, PL_EINVAL, "stream", OUT_ZERO, pl_run_import(&f->out.str, f->e, NULL, NULL)) \
    X(delete_eng, PL_EINVAL, "engine", OUT_ANY, pl_run_delete(NULL, "done"))              \
    X(delete_id, PL_EINVAL, "run id", OUT_ANY, pl_run_delete(f->e, NULL))                 \
    X(delete_id_ctrl, PL_EINVAL, "run id", OUT_ANY, pl_run_delete(f->e, CTRL_ID))         \
    X(tomb_out, PL_EINVAL, "out", OUT_ANY, pl_run_tombstone(NULL, f->e, "done"))          \
    X(tomb_v0, PL_EINVAL, "version", OUT_ANY, pl_run_tombstone(TOMB_V(0), f->e, "done"))  \
    X(tomb_id, PL_EINVAL, "run id", OUT_ANY, pl_run_tombstone(TOMB, f->e, NULL))          \
    X(tomb_id_ctrl, PL_EINVAL, "run id", OUT_ANY, pl_run_tombstone(TOMB, f->e, CTRL_ID))  \
    X(prune_eng, PL_EINVAL, "engine", OUT_ANY, pl_engine_prune(NULL, PRUNE_V(1), NULL))   \
    X(prune_v0, PL_EINVAL, "version", OUT_ANY, pl_engine_prune(f->e, PRUNE_V(0), NULL))   \
    X(prune_v99, PL_EINVAL, "version", OUT_ANY, pl_engine_prune(f->e, PRUNE_V(99), NULL))
/* clang-format on */

ENGINE_ROWS(ROW_FN)

Test(api_args, engine_and_runs)
{
    fx f;
    fx_open(&f);
    uint64_t before = 0, after = 0;
    cr_assert_eq(pl_engine_change_mark(&before, f.e), PL_OK);
    RUN_TABLE(&f, ENGINE_ROWS);
    cr_assert_eq(pl_engine_change_mark(&after, f.e), PL_OK);
    cr_expect_eq(before, after, "a bad call wrote to the store");
    fx_check_store(&f);
    fx_close(&f);
}

/* ------------------------------------------------------------------------ */
/* Time and events, the queue, schedules, rate budgets, pools, tokens       */
/* ------------------------------------------------------------------------ */

#define SCHED(name, cron, zone, policy, payload)                               \
    (&(pl_schedule){PL_SCHEDULE_VERSION, (name), (cron), (zone), (policy),     \
                    (payload), PL_OVERLAP_SKIP, PL_CATCH_UP_SKIP, 0, 0})
#define SCHED_V(v)                                                             \
    (&(pl_schedule){(v), "s", "* * * * *", NULL, "echo", NULL,                 \
                    PL_OVERLAP_SKIP, PL_CATCH_UP_SKIP, 0, 0})
#define WORKER_V(v)                                                            \
    (&(pl_worker_options){(v), 0, 0, NULL, NULL, NULL, NULL, 0})
#define POOL(v, threads, per, stack)                                           \
    (&(pl_pool_options){(v), (threads), (per), (stack)})
#define GRANT (&(pl_rate_grant){PL_RATE_GRANT_VERSION, false, 0, 0, 0, 0})
#define GRANT_V(v) (&(pl_rate_grant){(v), false, 0, 0, 0, 0})
#define TOKENS_V(v) (&(pl_llm_tokens){(v), 0, 0, 0})
#define HUGE_MS ((int64_t)1 << 62)

static bool g_admitted;
static int64_t g_at, g_retry;

static void pool_task(pl_engine *e, void *user)
{
    (void)e;
    (void)user;
}

/* clang-format off */
#define TIME_ROWS(X)                                                                       \
    X(signal_eng, PL_EINVAL, "engine", OUT_ZERO, pl_run_signal(&f->out.outcome, NULL, "done", "ev", f->obj)) \
    X(signal_id, PL_EINVAL, "run id", OUT_ZERO, pl_run_signal(&f->out.outcome, f->e, NULL, "ev", f->obj)) \
    X(signal_id_ctrl, PL_EINVAL, "run id", OUT_ZERO, pl_run_signal(&f->out.outcome, f->e, CTRL_ID, "ev", f->obj)) \
    X(signal_name, PL_EINVAL, "name", OUT_ZERO, pl_run_signal(&f->out.outcome, f->e, "done", NULL, f->obj)) \
    X(signal_name_empty, PL_EINVAL, "name", OUT_ZERO, pl_run_signal(&f->out.outcome, f->e, "done", "", f->obj)) \
    X(signal_name_long, PL_EINVAL, "name", OUT_ZERO, pl_run_signal(&f->out.outcome, f->e, "done", f->long_name, f->obj)) \
    X(signal_name_utf8, PL_EINVAL, "name", OUT_ZERO, pl_run_signal(&f->out.outcome, f->e, "done", BAD_UTF8, f->obj)) \
    X(signal_payload, PL_EINVAL, "payload", OUT_ZERO, pl_run_signal(&f->out.outcome, f->e, "done", "ev", NULL)) \
    X(signal_payload_arr, PL_EJSON, "payload", OUT_ZERO, pl_run_signal(&f->out.outcome, f->e, "done", "ev", f->arr)) \
    X(cancel_eng, PL_EINVAL, "engine", OUT_ANY, pl_run_cancel(NULL, "done", NULL))        \
    X(cancel_id, PL_EINVAL, "run id", OUT_ANY, pl_run_cancel(f->e, NULL, NULL))           \
    X(cancel_id_ctrl, PL_EINVAL, "run id", OUT_ANY, pl_run_cancel(f->e, CTRL_ID, NULL))   \
    X(cancel_reason_long, PL_EINVAL, "reason", OUT_ANY, pl_run_cancel(f->e, "done", f->long_reason)) \
    X(wake_eng, PL_EINVAL, "engine", OUT_ZERO, pl_engine_wake(NULL, &f->out.i64))         \
    X(wait_eng, PL_EINVAL, "engine", OUT_ANY, pl_engine_set_wait_in_place(NULL, 10))      \
    X(wait_neg, PL_EINVAL, "ms", OUT_ANY, pl_engine_set_wait_in_place(f->e, -2))          \
    X(submit_out, PL_EINVAL, "out", OUT_ANY, pl_run_submit(NULL, f->e, ACT("echo", f->obj), NULL)) \
    X(submit_eng, PL_EINVAL, "engine", OUT_ZERO, pl_run_submit(&f->out.str, NULL, ACT("echo", f->obj), NULL)) \
    X(submit_root, PL_EINVAL, "root", OUT_ZERO, pl_run_submit(&f->out.str, f->e, NULL, NULL)) \
    X(submit_payload_arr, PL_EJSON, "payload", OUT_ZERO, pl_run_submit(&f->out.str, f->e, ACT("echo", f->arr), NULL)) \
    X(submit_policy_long, PL_EINVAL, "policy", OUT_ZERO, pl_run_submit(&f->out.str, f->e, ACT(f->long_name, f->obj), NULL)) \
    X(submit_id_ctrl, PL_EINVAL, "run id", OUT_ZERO, pl_run_submit(&f->out.str, f->e, ACT("echo", f->obj), RUN_ID(CTRL_ID))) \
    X(submit_opts_v0, PL_EINVAL, "version", OUT_ZERO, pl_run_submit(&f->out.str, f->e, ACT("echo", f->obj), RUN_V(0))) \
    X(worker_eng, PL_EINVAL, "engine", OUT_ANY, pl_worker_run(NULL, NULL))                \
    X(worker_v0, PL_EINVAL, "version", OUT_ANY, pl_worker_run(f->e, WORKER_V(0)))         \
    X(worker_v99, PL_EINVAL, "version", OUT_ANY, pl_worker_run(f->e, WORKER_V(99)))       \
    X(sched_eng, PL_EINVAL, "engine", OUT_ANY, pl_schedule_put(NULL, SCHED("s", "* * * * *", NULL, "echo", NULL))) \
    X(sched_null, PL_EINVAL, "schedule", OUT_ANY, pl_schedule_put(f->e, NULL))            \
    X(sched_v0, PL_EINVAL, "version", OUT_ANY, pl_schedule_put(f->e, SCHED_V(0)))         \
    X(sched_v99, PL_EINVAL, "version", OUT_ANY, pl_schedule_put(f->e, SCHED_V(99)))       \
    X(sched_name, PL_EINVAL, "name", OUT_ANY, pl_schedule_put(f->e, SCHED(NULL, "* * * * *", NULL, "echo", NULL))) \
    X(sched_name_empty, PL_EINVAL, "name", OUT_ANY, pl_schedule_put(f->e, SCHED("", "* * * * *", NULL, "echo", NULL))) \
    X(sched_name_ctrl, PL_EINVAL, "name", OUT_ANY, pl_schedule_put(f->e, SCHED(CTRL_ID, "* * * * *", NULL, "echo", NULL))) \
    X(sched_name_long, PL_EINVAL, "name", OUT_ANY, pl_schedule_put(f->e, SCHED(f->long_name, "* * * * *", NULL, "echo", NULL))) \
    X(sched_cron, PL_EINVAL, "cron", OUT_ANY, pl_schedule_put(f->e, SCHED("s", NULL, NULL, "echo", NULL))) \
    X(sched_cron_bad, PL_EINVAL, "cron", OUT_ANY, pl_schedule_put(f->e, SCHED("s", "61 * * * *", NULL, "echo", NULL))) \
    X(sched_zone, PL_EINVAL, "zone", OUT_ANY, pl_schedule_put(f->e, SCHED("s", "* * * * *", "No/Such_Zone", "echo", NULL))) \
    X(sched_zone_dots, PL_EINVAL, "zone", OUT_ANY, pl_schedule_put(f->e, SCHED("s", "* * * * *", "../../etc/passwd", "echo", NULL))) \
    X(sched_policy, PL_EINVAL, "policy", OUT_ANY, pl_schedule_put(f->e, SCHED("s", "* * * * *", NULL, NULL, NULL))) \
    X(sched_policy_empty, PL_EINVAL, "policy", OUT_ANY, pl_schedule_put(f->e, SCHED("s", "* * * * *", NULL, "", NULL))) \
    X(sched_policy_long, PL_EINVAL, "policy", OUT_ANY, pl_schedule_put(f->e, SCHED("s", "* * * * *", NULL, f->long_name, NULL))) \
    X(sched_payload_arr, PL_EJSON, "payload", OUT_ANY, pl_schedule_put(f->e, SCHED("s", "* * * * *", NULL, "echo", f->arr))) \
    X(sched_del_eng, PL_EINVAL, "engine", OUT_ANY, pl_schedule_delete(NULL, "s"))         \
    X(sched_del_name, PL_EINVAL, "name", OUT_ANY, pl_schedule_delete(f->e, NULL))         \
    X(sched_del_ctrl, PL_EINVAL, "name", OUT_ANY, pl_schedule_delete(f->e, CTRL_ID))      \
    X(sched_list_out, PL_EINVAL, "out", OUT_ANY, pl_schedule_list(NULL, f->e, 0))         \
    X(sched_list_eng, PL_EINVAL, "engine", OUT_ZERO, pl_schedule_list(&f->out.json, NULL, 0)) \
    X(sched_list_neg, PL_EINVAL, "now", OUT_ZERO, pl_schedule_list(&f->out.json, f->e, -1)) \
    X(sched_fire_eng, PL_EINVAL, "engine", OUT_ANY, pl_schedule_fire(NULL, 0, NULL, NULL)) \
    X(sched_fire_neg, PL_EINVAL, "now", OUT_ANY, pl_schedule_fire(f->e, -1, NULL, NULL))  \
    X(sched_fire_huge, PL_EINVAL, "now", OUT_ANY, pl_schedule_fire(f->e, HUGE_MS, NULL, NULL)) \
    X(cron_out, PL_EINVAL, "out", OUT_ANY, pl_cron_next(NULL, "* * * * *", NULL, 0))      \
    X(cron_expr, PL_EINVAL, "cron", OUT_ZERO, pl_cron_next(&f->out.i64, NULL, NULL, 0))   \
    X(cron_expr_empty, PL_EINVAL, "cron", OUT_ZERO, pl_cron_next(&f->out.i64, "", NULL, 0)) \
    X(cron_zone, PL_EINVAL, "zone", OUT_ZERO, pl_cron_next(&f->out.i64, "* * * * *", "No/Such_Zone", 0)) \
    X(cron_zone_empty, PL_EINVAL, "zone", OUT_ZERO, pl_cron_next(&f->out.i64, "* * * * *", "", 0)) \
    X(cron_neg, PL_EINVAL, "time", OUT_ZERO, pl_cron_next(&f->out.i64, "* * * * *", NULL, -1)) \
    X(cron_huge, PL_EINVAL, "time", OUT_ZERO, pl_cron_next(&f->out.i64, "* * * * *", NULL, HUGE_MS)) \
    X(rate_out, PL_EINVAL, "out", OUT_ANY, pl_rate_take(NULL, &g_at, &g_retry, f->e, "r", 1, 1000)) \
    X(rate_eng, PL_EINVAL, "engine", OUT_ANY, pl_rate_take(&g_admitted, &g_at, &g_retry, NULL, "r", 1, 1000)) \
    X(rate_res, PL_EINVAL, "resource", OUT_ANY, pl_rate_take(&g_admitted, &g_at, &g_retry, f->e, NULL, 1, 1000)) \
    X(rate_res_empty, PL_EINVAL, "resource", OUT_ANY, pl_rate_take(&g_admitted, &g_at, &g_retry, f->e, "", 1, 1000)) \
    X(rate_res_long, PL_EINVAL, "resource", OUT_ANY, pl_rate_take(&g_admitted, &g_at, &g_retry, f->e, f->long_id, 1, 1000)) \
    X(rate_limit0, PL_EINVAL, "limit", OUT_ANY, pl_rate_take(&g_admitted, &g_at, &g_retry, f->e, "r", 0, 1000)) \
    X(rate_window0, PL_EINVAL, "window", OUT_ANY, pl_rate_take(&g_admitted, &g_at, &g_retry, f->e, "r", 1, 0)) \
    X(rate_window_neg, PL_EINVAL, "window", OUT_ANY, pl_rate_take(&g_admitted, &g_at, &g_retry, f->e, "r", 1, -5)) \
    X(rate_window_huge, PL_EINVAL, "window", OUT_ANY, pl_rate_take(&g_admitted, &g_at, &g_retry, f->e, "r", 1, INT64_MAX)) \
    X(units_out, PL_EINVAL, "out", OUT_ANY, pl_rate_take_units(NULL, f->e, "r", "tok", 10, 1000, 1)) \
    X(units_v0, PL_EINVAL, "version", OUT_ANY, pl_rate_take_units(GRANT_V(0), f->e, "r", "tok", 10, 1000, 1)) \
    X(units_unit, PL_EINVAL, "unit", OUT_ANY, pl_rate_take_units(GRANT, f->e, "r", NULL, 10, 1000, 1)) \
    X(units_unit_long, PL_EINVAL, "unit", OUT_ANY, pl_rate_take_units(GRANT, f->e, "r", f->long_id, 10, 1000, 1)) \
    X(units_budget0, PL_EINVAL, "budget", OUT_ANY, pl_rate_take_units(GRANT, f->e, "r", "tok", 0, 1000, 1)) \
    X(units_budget_huge, PL_EINVAL, "budget", OUT_ANY, pl_rate_take_units(GRANT, f->e, "r", "tok", UINT64_MAX, 1000, 1)) \
    X(units_window_huge, PL_EINVAL, "window", OUT_ANY, pl_rate_take_units(GRANT, f->e, "r", "tok", 10, HUGE_MS, 1)) \
    X(units_amount, PL_ELIMIT, "more than", OUT_ANY, pl_rate_take_units(GRANT, f->e, "r", "tok", 10, 1000, 11)) \
    X(settle_huge, PL_EINVAL, "used", OUT_ANY, pl_rate_settle_units(GRANT, f->e, "r", "tok", 10, 1000, 0, 1, UINT64_MAX)) \
    X(pool_out, PL_EINVAL, "out", OUT_ANY, pl_pool_new(NULL, f->e, NULL))                 \
    X(pool_eng, PL_EINVAL, "engine", OUT_ZERO, pl_pool_new(&f->out.pool, NULL, NULL))     \
    X(pool_v0, PL_EINVAL, "version", OUT_ZERO, pl_pool_new(&f->out.pool, f->e, POOL(0, 2, 0, 0))) \
    X(pool_per, PL_EINVAL, "tasks per thread", OUT_ZERO, pl_pool_new(&f->out.pool, f->e, POOL(1, 2, 257, 0))) \
    X(pool_stack, PL_EINVAL, "stack", OUT_ZERO, pl_pool_new(&f->out.pool, f->e, POOL(1, 2, 0, 1024))) \
    X(pool_threads, PL_EINVAL, "threads", OUT_ZERO, pl_pool_new(&f->out.pool, f->e, POOL(1, UINT32_MAX, 0, 0))) \
    X(pool_submit, PL_EINVAL, "pool", OUT_ANY, pl_pool_submit(NULL, pool_task, NULL))     \
    X(pool_wait, PL_EINVAL, "pool", OUT_ANY, pl_pool_wait(NULL))                          \
    X(tokens_out, PL_EINVAL, "out", OUT_ANY, pl_llm_run_tokens(NULL, f->e, "done"))       \
    X(tokens_v0, PL_EINVAL, "version", OUT_ANY, pl_llm_run_tokens(TOKENS_V(0), f->e, "done")) \
    X(tokens_eng, PL_EINVAL, "engine", OUT_ANY, pl_llm_run_tokens(TOKENS_V(1), NULL, "done")) \
    X(tokens_id, PL_EINVAL, "run id", OUT_ANY, pl_llm_run_tokens(TOKENS_V(1), f->e, NULL)) \
    X(tokens_id_ctrl, PL_EINVAL, "run id", OUT_ANY, pl_llm_run_tokens(TOKENS_V(1), f->e, CTRL_ID))
/* clang-format on */

TIME_ROWS(ROW_FN)

Test(api_args, time_queue_schedules)
{
    fx f;
    fx_open(&f);
    uint64_t before = 0, after = 0;
    cr_assert_eq(pl_engine_change_mark(&before, f.e), PL_OK);
    RUN_TABLE(&f, TIME_ROWS);
    cr_assert_eq(pl_engine_change_mark(&after, f.e), PL_OK);
    cr_expect_eq(before, after, "a bad call wrote to the store");
    fx_check_store(&f);
    fx_close(&f);
}

/* ------------------------------------------------------------------------ */
/* Without an engine: steps, the registry, JSON, schemas, the sandbox,      */
/* tools, traces, decorators, models and MCP servers                        */
/* ------------------------------------------------------------------------ */

static int noop_policy(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                       void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    return pl_steps_add_result(out, pl_json_empty());
}

static void noop_release(void *user) { (void)user; }

#define DEF(v, nm, pf)                                                         \
    (&(pl_policy_def){.version = (v), .name = (nm), .fn = (pf)})
#define V(type, v) (&(type){.version = (v)})
static pl_steps *g_steps;       /* an empty list */
static pl_sandbox *g_sb;        /* a sandbox on a temporary directory */
static pl_schema *g_schema;     /* {"type": "object"} */
static pl_decorator g_dec;      /* a constructor's output */
static const char *const g_argv[] = {"true", NULL};
/* clang-format off */
#define PURE_ROWS(X)                                                                       \
    X(dur_out, PL_EINVAL, "durability", OUT_ANY, pl_durability_parse(NULL, "sync"))       \
    X(dur_name, PL_EINVAL, "durability", OUT_ANY, pl_durability_parse(&f->out.dur, NULL)) \
    X(dur_bad, PL_EINVAL, "durability", OUT_ANY, pl_durability_parse(&f->out.dur, "fast")) \
    X(type_out, PL_EINVAL, "out", OUT_ANY, pl_step_type_parse(NULL, "text"))        \
    X(type_bad, PL_EINVAL, "step type", OUT_ANY, pl_step_type_parse(&f->out.type, "txt")) \
    X(prev_hash_step, PL_EINVAL, "step", OUT_ANY, pl_step_prev_hash(f->out.hash, NULL))   \
    X(hash_step, PL_EINVAL, "step", OUT_ANY, pl_step_hash(f->out.hash, NULL))             \
    X(steps_new, PL_EINVAL, "out", OUT_ANY, pl_steps_new(NULL))                           \
    X(steps_move_dst, PL_EINVAL, "lists", OUT_ANY, pl_steps_move(NULL, g_steps))           \
    X(steps_move_same, PL_EINVAL, "different", OUT_ANY, pl_steps_move(g_steps, g_steps))       \
    X(steps_push_list, PL_EINVAL, "list", OUT_ANY, pl_steps_push(NULL, NULL))             \
    X(steps_push_step, PL_EINVAL, "step", OUT_ANY, pl_steps_push(g_steps, NULL))          \
    X(steps_add_list, PL_EINVAL, "list", OUT_ANY, pl_steps_add(NULL, PL_STEP_TEXT, "a", f->obj)) \
    X(steps_add_type, PL_EINVAL, "step type", OUT_ANY, pl_steps_add(g_steps, (pl_step_type)99, "a", f->obj)) \
    X(steps_add_wait, PL_EINVAL, "engine", OUT_ANY, pl_steps_add(g_steps, PL_STEP_WAIT, "a", f->obj)) \
    X(steps_add_actor, PL_EINVAL, "actor", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, NULL, f->obj)) \
    X(steps_add_actor_empty, PL_EINVAL, "actor", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, "", f->obj)) \
    X(steps_add_actor_long, PL_EINVAL, "actor", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, f->long_name, f->obj)) \
    X(steps_add_actor_utf8, PL_EINVAL, "actor", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, BAD_UTF8, f->obj)) \
    X(steps_add_actor_ctrl, PL_EINVAL, "actor", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, CTRL_ID, f->obj)) \
    X(steps_add_payload, PL_EINVAL, "payload", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, "a", NULL)) \
    X(steps_add_payload_arr, PL_EJSON, "payload", OUT_ANY, pl_steps_add(g_steps, PL_STEP_TEXT, "a", f->arr)) \
    X(steps_text_list, PL_EINVAL, "list", OUT_ANY, pl_steps_add_text(NULL, "a", "hi"))    \
    X(steps_text_text, PL_EINVAL, "text", OUT_ANY, pl_steps_add_text(g_steps, "a", NULL)) \
    X(steps_result_payload, PL_EINVAL, "payload", OUT_ANY, pl_steps_add_result(g_steps, NULL)) \
    X(steps_result_arr, PL_EJSON, "payload", OUT_ANY, pl_steps_add_result(g_steps, f->arr)) \
    X(steps_call_policy, PL_EINVAL, "policy", OUT_ANY, pl_steps_add_call(g_steps, NULL, f->obj)) \
    X(steps_call_policy_long, PL_EINVAL, "policy", OUT_ANY, pl_steps_add_call(g_steps, f->long_name, f->obj)) \
    X(steps_call_arr, PL_EJSON, "payload", OUT_ANY, pl_steps_add_call(g_steps, "echo", f->arr)) \
    X(steps_error_code, PL_EINVAL, "code", OUT_ANY, pl_steps_add_error(g_steps, NULL, "m")) \
    X(steps_error_code_empty, PL_EINVAL, "code", OUT_ANY, pl_steps_add_error(g_steps, "", "m")) \
    X(steps_resultf_fmt, PL_EINVAL, "fmt", OUT_ANY, pl_steps_add_resultf(g_steps, NULL))  \
    X(steps_resultf_arr, PL_EJSON, "object", OUT_ANY, pl_steps_add_resultf(g_steps, "[i]", 1)) \
    X(reg_new, PL_EINVAL, "out", OUT_ANY, pl_registry_new(NULL))                          \
    X(reg_add_reg, PL_EINVAL, "registry", OUT_ANY, pl_registry_add(NULL, DEF(PL_POLICY_DEF_VERSION, "x", noop_policy))) \
    X(reg_add_def, PL_EINVAL, "def", OUT_ANY, pl_registry_add(f->reg, NULL))              \
    X(reg_add_v0, PL_EINVAL, "version", OUT_ANY, pl_registry_add(f->reg, DEF(0, "x", noop_policy))) \
    X(reg_add_v99, PL_EINVAL, "version", OUT_ANY, pl_registry_add(f->reg, DEF(99, "x", noop_policy))) \
    X(reg_add_name, PL_EINVAL, "name", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, NULL, noop_policy))) \
    X(reg_add_name_empty, PL_EINVAL, "name", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, "", noop_policy))) \
    X(reg_add_name_long, PL_EINVAL, "name", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, f->long_name, noop_policy))) \
    X(reg_add_name_utf8, PL_EINVAL, "name", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, BAD_UTF8, noop_policy))) \
    X(reg_add_name_ctrl, PL_EINVAL, "name", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, CTRL_ID, noop_policy))) \
    X(reg_add_fn, PL_EINVAL, "function", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, "x", NULL))) \
    X(reg_add_taken, PL_EEXIST, "echo", OUT_ANY, pl_registry_add(f->reg, DEF(PL_POLICY_DEF_VERSION, "echo", noop_policy))) \
    X(reg_add_schema_arr, PL_EJSON, "schema", OUT_ANY, pl_registry_add(f->reg, (&(pl_policy_def){.version = PL_POLICY_DEF_VERSION, .name = "x", .fn = noop_policy, .input_schema = "[]"}))) \
    X(reg_add_schema_bad, PL_EJSON, "schema", OUT_ANY, pl_registry_add(f->reg, (&(pl_policy_def){.version = PL_POLICY_DEF_VERSION, .name = "x", .fn = noop_policy, .input_schema = "{"}))) \
    X(reg_owned_release, PL_EINVAL, "release", OUT_ANY, pl_registry_add_owned(f->reg, DEF(PL_POLICY_DEF_VERSION, "x", noop_policy), NULL)) \
    X(reg_owned_name, PL_EINVAL, "name", OUT_ANY, pl_registry_add_owned(f->reg, DEF(PL_POLICY_DEF_VERSION, "", noop_policy), noop_release)) \
    X(reg_fn_reg, PL_EINVAL, "registry", OUT_ANY, pl_registry_add_fn(NULL, "x", noop_policy, NULL)) \
    X(reg_fn_name, PL_EINVAL, "name", OUT_ANY, pl_registry_add_fn(f->reg, NULL, noop_policy, NULL)) \
    X(reg_fn_fn, PL_EINVAL, "function", OUT_ANY, pl_registry_add_fn(f->reg, "x", NULL, NULL))   \
    X(reg_human_name, PL_EINVAL, "name", OUT_ANY, pl_registry_add_human(f->reg, NULL))    \
    X(reg_human_reg, PL_EINVAL, "registry", OUT_ANY, pl_registry_add_human(NULL, "h"))    \
    X(plugin_reg, PL_EINVAL, "registry", OUT_ANY, pl_plugin_load(NULL, "/nonexistent.so")) \
    X(plugin_path, PL_EINVAL, "path", OUT_ANY, pl_plugin_load(f->reg, NULL))              \
    X(plugin_path_empty, PL_EINVAL, "path", OUT_ANY, pl_plugin_load(f->reg, ""))          \
    X(plugin_missing, PL_ENOTFOUND, "/nonexistent", OUT_ANY, pl_plugin_load(f->reg, "/nonexistent/p.so")) \
    X(pack_out, PL_EINVAL, "out", OUT_ANY, pl_json_pack(NULL, "{s:i}", "a", 1))           \
    X(pack_fmt, PL_EINVAL, "fmt", OUT_ZERO, pl_json_pack(&f->out.json, NULL))             \
    X(pack_fmt_bad, PL_EINVAL, "format", OUT_ZERO, pl_json_pack(&f->out.json, "{s:i", "a", 1)) \
    X(pack_key, PL_EINVAL, "key", OUT_ZERO, pl_json_pack(&f->out.json, "{s:i}", (const char *)NULL, 1)) \
    X(pack_str, PL_EINVAL, "NULL", OUT_ZERO, pl_json_pack(&f->out.json, "{s:s}", "a", (const char *)NULL)) \
    X(unpack_json, PL_EINVAL, "json", OUT_ANY, pl_json_unpack(NULL, "{}"))                \
    X(unpack_fmt, PL_EINVAL, "fmt", OUT_ANY, pl_json_unpack(f->obj, NULL))                \
    X(schema_out, PL_EINVAL, "out", OUT_ANY, pl_schema_compile(NULL, f->obj))             \
    X(schema_null, PL_EINVAL, "schema", OUT_ZERO, pl_schema_compile(&f->out.schema, NULL)) \
    X(schema_arr, PL_EJSON, "object", OUT_ZERO, pl_schema_compile(&f->out.schema, f->arr)) \
    X(schema_text_null, PL_EINVAL, "text", OUT_ZERO, pl_schema_compile_text(&f->out.schema, NULL)) \
    X(schema_text_bad, PL_EJSON, "JSON", OUT_ZERO, pl_schema_compile_text(&f->out.schema, "{")) \
    X(schema_text_empty, PL_EJSON, "JSON", OUT_ZERO, pl_schema_compile_text(&f->out.schema, "")) \
    X(validate_schema, PL_EINVAL, "schema", OUT_ANY, pl_schema_validate(NULL, NULL, f->obj)) \
    X(validate_instance, PL_EINVAL, "instance", OUT_ANY, pl_schema_validate(NULL, g_schema, NULL)) \
    X(validate_v0, PL_EINVAL, "version", OUT_ANY, pl_schema_validate(V(pl_schema_error, 0), g_schema, f->obj)) \
    X(sb_out, PL_EINVAL, "out", OUT_ANY, pl_sandbox_new(NULL, "/tmp", NULL))              \
    X(sb_root, PL_EINVAL, "root", OUT_ZERO, pl_sandbox_new(&f->out.sb, NULL, NULL))       \
    X(sb_root_empty, PL_EINVAL, "root", OUT_ZERO, pl_sandbox_new(&f->out.sb, "", NULL))   \
    X(sb_root_missing, PL_ENOTFOUND, "/nonexistent", OUT_ZERO, pl_sandbox_new(&f->out.sb, "/nonexistent/dir", NULL)) \
    X(sb_v0, PL_EINVAL, "version", OUT_ZERO, pl_sandbox_new(&f->out.sb, "/tmp", V(pl_sandbox_options, 0))) \
    X(sb_v99, PL_EINVAL, "version", OUT_ZERO, pl_sandbox_new(&f->out.sb, "/tmp", V(pl_sandbox_options, 99))) \
    X(sb_resolve_out, PL_EINVAL, "out", OUT_ANY, pl_sandbox_resolve(NULL, g_sb, "a", 1))  \
    X(sb_resolve_sb, PL_EINVAL, "sandbox", OUT_ZERO, pl_sandbox_resolve(&f->out.str, NULL, "a", 1)) \
    X(sb_resolve_path, PL_EINVAL, "path", OUT_ZERO, pl_sandbox_resolve(&f->out.str, g_sb, NULL, 1)) \
    X(sb_resolve_escape, PL_EFORBIDDEN, "..", OUT_ZERO, pl_sandbox_resolve(&f->out.str, g_sb, "../x", 4)) \
    X(sb_resolve_nul, PL_EINVAL, "NUL", OUT_ZERO, pl_sandbox_resolve(&f->out.str, g_sb, "a\0b", 3)) \
    X(sb_resolve_huge, PL_ELIMIT, "longer", OUT_ZERO, pl_sandbox_resolve(&f->out.str, g_sb, "a", SIZE_MAX)) \
    X(sb_open_out, PL_EINVAL, "out", OUT_ANY, pl_sandbox_open_file(NULL, g_sb, "a", 1, 0, 0)) \
    X(sb_open_escape, PL_EFORBIDDEN, "..", OUT_ANY, pl_sandbox_open_file(&f->out.fd, g_sb, "../x", 4, 0, 0)) \
    X(sb_cmd_sb, PL_EINVAL, "sandbox", OUT_ANY, pl_sandbox_check_command(NULL, g_argv, 1)) \
    X(sb_cmd_argv, PL_EINVAL, "argv", OUT_ANY, pl_sandbox_check_command(g_sb, NULL, 1))   \
    X(sb_cmd_argc, PL_EINVAL, "empty", OUT_ANY, pl_sandbox_check_command(g_sb, g_argv, 0)) \
    X(sb_cmd_argc_huge, PL_EINVAL, "NULL", OUT_ANY, pl_sandbox_check_command(g_sb, g_argv, 2)) \
    X(tools_out, PL_EINVAL, "out", OUT_ANY, pl_tools_new(NULL, NULL))                     \
    X(tools_v0, PL_EINVAL, "version", OUT_ZERO, pl_tools_new(&f->out.tools, V(pl_tools_options, 0))) \
    X(tools_reg, PL_EINVAL, "registry", OUT_ANY, pl_tools_register(NULL, NULL))           \
    X(trace_out, PL_EINVAL, "out", OUT_ANY, pl_trace_open(NULL, "/tmp/x"))                \
    X(trace_path, PL_EINVAL, "path", OUT_ZERO, pl_trace_open(&f->out.trace, NULL))        \
    X(trace_path_empty, PL_EIO, "cannot open", OUT_ZERO, pl_trace_open(&f->out.trace, ""))    \
    X(otel_stats, PL_EINVAL, "otel", OUT_ANY, pl_otel_stats(V(pl_otel_counts, 1), NULL))  \
    X(otel_flush, PL_EINVAL, "otel", OUT_ANY, pl_otel_flush(NULL, 10))                    \
    X(cache_out, PL_EINVAL, "out", OUT_ANY, pl_schema_cache_new(NULL))                    \
    X(dec_validate_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_validate(NULL, NULL))     \
    X(dec_loop_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_loop(NULL, 3))                \
    X(dec_invoke_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_invoke_action(NULL))        \
    X(dec_invoke_with_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_invoke_action_with(NULL, NULL, 0)) \
    X(dec_invoke_with_per, PL_EINVAL, "list", OUT_ANY, pl_decorator_invoke_action_with(&g_dec, NULL, 2)) \
    X(dec_retry_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_retry(NULL, NULL))           \
    X(dec_retry_v0, PL_EINVAL, "version", OUT_ANY, pl_decorator_retry(&g_dec, V(pl_retry_options, 0))) \
    X(dec_retry_v99, PL_EINVAL, "version", OUT_ANY, pl_decorator_retry(&g_dec, V(pl_retry_options, 99))) \
    X(dec_timeout_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_timeout(NULL, 100))        \
    X(dec_timeout_zero, PL_EINVAL, "ms", OUT_ANY, pl_decorator_timeout(&g_dec, 0))        \
    X(dec_timeout_neg, PL_EINVAL, "ms", OUT_ANY, pl_decorator_timeout(&g_dec, -5))        \
    X(dec_timeout_huge, PL_EINVAL, "ms", OUT_ANY, pl_decorator_timeout(&g_dec, INT64_MAX)) \
    X(dec_budget_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_budget(NULL, V(pl_budget, 1))) \
    X(dec_budget_null, PL_EINVAL, "limits", OUT_ANY, pl_decorator_budget(&g_dec, NULL))   \
    X(dec_budget_v0, PL_EINVAL, "version", OUT_ANY, pl_decorator_budget(&g_dec, V(pl_budget, 0))) \
    X(dec_cap_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_cap(NULL, 100))                \
    X(dec_cap_zero, PL_EINVAL, "cap", OUT_ANY, pl_decorator_cap(&g_dec, 0))         \
    X(dec_rate_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_rate_limit(NULL, NULL))       \
    X(dec_rate_null, PL_EINVAL, "options", OUT_ANY, pl_decorator_rate_limit(&g_dec, NULL))   \
    X(dec_rate_v0, PL_EINVAL, "version", OUT_ANY, pl_decorator_rate_limit(&g_dec, V(pl_rate_limit_options, 0))) \
    X(dec_page_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_paginate(NULL, NULL))         \
    X(dec_page_v0, PL_EINVAL, "version", OUT_ANY, pl_decorator_paginate(&g_dec, V(pl_paginate_options, 0))) \
    X(dec_observe_out, PL_EINVAL, "out", OUT_ANY, pl_decorator_observe(NULL, NULL))       \
    X(dec_observe_v0, PL_EINVAL, "version", OUT_ANY, pl_decorator_observe(&g_dec, V(pl_observe_options, 0))) \
    X(observation_out, PL_EINVAL, "out", OUT_ANY, pl_observation_default(NULL, "t", f->obj)) \
    X(observation_raw, PL_EINVAL, "raw", OUT_ZERO, pl_observation_default(&f->out.json, "t", NULL)) \
    X(llm_reg, PL_EINVAL, "reg", OUT_ANY, pl_llm_register(NULL, "m", "scripted://x", NULL, NULL)) \
    X(llm_name, PL_EINVAL, "name", OUT_ANY, pl_llm_register(f->reg, NULL, "scripted://x", NULL, NULL)) \
    X(llm_name_utf8, PL_EINVAL, "name", OUT_ANY, pl_llm_register(f->reg, BAD_UTF8, "scripted://x", NULL, NULL)) \
    X(llm_url, PL_EINVAL, "url", OUT_ANY, pl_llm_register(f->reg, "m", NULL, NULL, NULL)) \
    X(llm_url_bad, PL_EINVAL, "url", OUT_ANY, pl_llm_register(f->reg, "m", "gopher://x", NULL, NULL)) \
    X(llm_v0, PL_EINVAL, "version", OUT_ANY, pl_llm_register(f->reg, "m", "scripted://x", NULL, V(pl_llm_options, 0))) \
    X(mcp_out, PL_EINVAL, "out", OUT_ANY, pl_mcp_register(NULL, f->reg, "m", "stdio:true", NULL)) \
    X(mcp_reg, PL_EINVAL, "registry", OUT_ZERO, pl_mcp_register(&f->out.mcp, NULL, "m", "stdio:true", NULL)) \
    X(mcp_name, PL_EINVAL, "name", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, NULL, "stdio:true", NULL)) \
    X(mcp_name_utf8, PL_EINVAL, "name", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, BAD_UTF8, "stdio:true", NULL)) \
    X(mcp_spec, PL_EINVAL, "spec", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, "m", NULL, NULL)) \
    X(mcp_spec_empty, PL_EINVAL, "spec", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, "m", "", NULL)) \
    X(mcp_v0, PL_EINVAL, "version", OUT_ZERO, pl_mcp_register(&f->out.mcp, f->reg, "m", "stdio:true", V(pl_mcp_options, 0)))
/* clang-format on */

PURE_ROWS(ROW_FN)

Test(api_args, without_an_engine)
{
    fx f;
    memset(&f, 0, sizeof f);
    fx_names(&f);
    f.reg = t_registry();
    size_t policies = pl_registry_count(f.reg);
    cr_assert_eq(pl_steps_new(&g_steps), PL_OK);
    cr_assert_eq(pl_sandbox_new(&g_sb, t_tmpdir(), NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(pl_schema_compile_text(&g_schema, "{\"type\":\"object\"}"),
                 PL_OK, "%s", pl_errmsg());
    RUN_TABLE(&f, PURE_ROWS);
    /* nothing was added by a refused call */
    cr_expect_eq(pl_steps_count(g_steps), 0, "a refused step was added");
    cr_expect_eq(pl_registry_count(f.reg), policies,
                 "a refused policy was registered");
    pl_schema_free(g_schema);
    pl_sandbox_free(g_sb);
    pl_steps_free(g_steps);
    fx_close(&f);
}
