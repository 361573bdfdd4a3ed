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
#include "support_api_args.h"

#include <stdio.h>

TestSuite(api_args, .timeout = 120);

/* ------------------------------------------------------------------------ */
/* The engine: opening it, runs, their ledgers, export, deletion            */
/* ------------------------------------------------------------------------ */

#define ENGINE_V(v) ENGINE_RETAIN(v, 0, 0)
/* The retention rules (version 6) */
#define ENGINE_RETAIN(v, ms, failed_ms)                                        \
    (&(pl_engine_options){(v), PL_DURABILITY_SYNC, 0, 0, 0, 0, NULL, NULL,     \
                          false, NULL, 0, false, (ms), 0, (failed_ms)})
#define TOO_LONG (PL_RETAIN_MS_MAX + 1)
#define STATS_V(v) (&(pl_store_stats){(v), 0, 0, 0, 0, 0, 0, 0})
#define RUNS_V(v, after) (&(pl_runs_options){(v), (after), false, NULL})
#define PRUNE_V(v) (&(pl_prune_options){(v), 0, 0, 0, false, NULL, NULL, NULL})
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

/* clang-format off */
#define ENGINE_ROWS(X)                                                                     \
    X(open_out, PL_EINVAL, "out", OUT_ANY, pl_engine_open(NULL, g_store, f->reg, NULL))     \
    X(open_path, PL_EINVAL, "path", OUT_ZERO, pl_engine_open(&f->out.eng, NULL, f->reg, NULL)) \
    X(open_empty, PL_EINVAL, "path", OUT_ZERO, pl_engine_open(&f->out.eng, "", f->reg, NULL)) \
    X(open_reg, PL_EINVAL, "registry", OUT_ZERO, pl_engine_open(&f->out.eng, g_store, NULL, NULL)) \
    X(open_v0, PL_EINVAL, "version", OUT_ZERO, pl_engine_open(&f->out.eng, g_store, f->reg, ENGINE_V(0))) \
    X(open_v99, PL_EINVAL, "version", OUT_ZERO, pl_engine_open(&f->out.eng, g_store, f->reg, ENGINE_V(99))) \
    X(open_retain, PL_EINVAL, "retain_ms", OUT_ZERO, pl_engine_open(&f->out.eng, g_store, f->reg, ENGINE_RETAIN(6, TOO_LONG, 0))) \
    X(open_retain_failed, PL_EINVAL, "retain_failed_ms", OUT_ZERO, pl_engine_open(&f->out.eng, g_store, f->reg, ENGINE_RETAIN(6, 1, TOO_LONG))) \
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
    static const row rows[] = {ENGINE_ROWS(ROW_ENTRY)};
    run_on_a_store(rows, sizeof rows / sizeof rows[0]);
}

/* ------------------------------------------------------------------------ */
/* Time and events, the queue, schedules, rate budgets, pools, tokens       */
/* ------------------------------------------------------------------------ */

#define SCHED(name, cron, zone, policy, payload)                               \
    (&(pl_schedule){PL_SCHEDULE_VERSION, (name), (cron), (zone), (policy),     \
                    (payload), PL_OVERLAP_SKIP, PL_CATCH_UP_SKIP, 0, 0, 0,     \
                    NULL, 0, 0})
#define SCHED_V(v)                                                             \
    (&(pl_schedule){(v), "s", "* * * * *", NULL, "echo", NULL,                 \
                    PL_OVERLAP_SKIP, PL_CATCH_UP_SKIP, 0, 0, 0, NULL, 0, 0})
/* A schedule's run options (version 2) */
#define SCHED_RUN(prio, key, limit, deadline_in)                               \
    (&(pl_schedule){PL_SCHEDULE_VERSION, "s", "* * * * *", NULL, "echo", NULL, \
                    PL_OVERLAP_SKIP, PL_CATCH_UP_SKIP, 0, 0, (prio), (key),    \
                    (limit), (deadline_in)})
/* A schedule whose ticks count from @p start */
#define SCHED_START(start)                                                     \
    (&(pl_schedule){PL_SCHEDULE_VERSION, "s", "* * * * *", NULL, "echo", NULL, \
                    PL_OVERLAP_SKIP, PL_CATCH_UP_SKIP, 0, (start), 0, NULL, 0, \
                    0})
#define WORKER_V(v) WORKER_RETAIN(v, 0, 0)
#define WORKER_RETAIN(v, ms, failed_ms)                                        \
    (&(pl_worker_options){(v), 0, 0, NULL, NULL, NULL, NULL, (ms),             \
                          (failed_ms), NULL, NULL})
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
    X(worker_retain, PL_EINVAL, "retain_ms", OUT_ANY, pl_worker_run(f->e, WORKER_RETAIN(3, TOO_LONG, 1))) \
    X(worker_retain_failed, PL_EINVAL, "retain_failed_ms", OUT_ANY, pl_worker_run(f->e, WORKER_RETAIN(3, 1, TOO_LONG))) \
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
    X(sched_prio, PL_EINVAL, "priority", OUT_ANY, pl_schedule_put(f->e, SCHED_RUN(-1001, NULL, 0, 0))) \
    X(sched_key_limit, PL_EINVAL, "concurrency_limit", OUT_ANY, pl_schedule_put(f->e, SCHED_RUN(0, "k", 0, 0))) \
    X(sched_limit_key, PL_EINVAL, "concurrency_key", OUT_ANY, pl_schedule_put(f->e, SCHED_RUN(0, NULL, 1, 0))) \
    X(sched_key_empty, PL_EINVAL, "concurrency key", OUT_ANY, pl_schedule_put(f->e, SCHED_RUN(0, "", 1, 0))) \
    X(sched_deadline, PL_EINVAL, "deadline_in_ms", OUT_ANY, pl_schedule_put(f->e, SCHED_RUN(0, NULL, 0, -1))) \
    X(sched_start_neg, PL_EINVAL, "start_ms", OUT_ANY, pl_schedule_put(f->e, SCHED_START(-1))) \
    X(sched_start_9000, PL_EINVAL, "start_ms", OUT_ANY, pl_schedule_put(f->e, SCHED_START(221845392000000LL))) \
    X(sched_start_max, PL_EINVAL, "start_ms", OUT_ANY, pl_schedule_put(f->e, SCHED_START(INT64_MAX))) \
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
    static const row rows[] = {TIME_ROWS(ROW_ENTRY)};
    run_on_a_store(rows, sizeof rows / sizeof rows[0]);
}
