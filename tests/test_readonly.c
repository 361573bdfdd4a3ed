/*
 * test_readonly.c -- the API the store inspector needs: read-only engines
 * (engine.c, lmdb_env.c), pl_step_hash() (step.c, inspect.c), the resume
 * token in pl_run_info and pl_engine_stats().
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"

static pl_engine *open_ro(const char *path, const pl_registry *reg, int *st)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.read_only = true;
    pl_engine *e = NULL;
    *st = pl_engine_open(&e, path, reg, &o);
    return e;
}

static void make_store(const char *path)
{
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(e, "chain", "{\"n\": 3}", "r1"));
    pl_outcome_free(t_start(e, "fail", "{}", "failed"));
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(readonly, a_missing_store_is_not_created, .fini = t_cleanup)
{
    pl_registry *reg = t_registry();
    char missing[4300];
    t_store_in(missing, sizeof missing, t_tmpdir(), "none.db");
    int st;
    for (int i = 0; i < 2; i++) { /* the second open: nothing was created */
        cr_assert_null(open_ro(missing, reg, &st));
        cr_assert_eq(st, PL_ENOTFOUND, "%s", pl_errmsg());
        cr_assert(strstr(pl_errmsg(), "does not exist"), "%s", pl_errmsg());
    }
    if (t_on_pg()) {
        pl_registry_free(reg);
        return;
    }
    struct stat sb;
    cr_assert_neq(stat(missing, &sb), 0, "nothing was created");

    /* an empty directory: no data.mdb, none created */
    const char *dir = t_tmpdir();
    cr_assert_null(open_ro(dir, reg, &st));
    cr_assert_eq(st, PL_ENOTFOUND, "%s", pl_errmsg());
    char data[4200];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    cr_assert_neq(stat(data, &sb), 0);
    pl_registry_free(reg);
}

Test(readonly, a_file_that_is_not_a_store_is_refused, .fini = t_cleanup)
{
    t_lmdb_only("a file that is not an LMDB store");
    pl_registry *reg = t_registry();
    char p[4096];
    snprintf(p, sizeof p, "%s/junk", t_tmpdir());
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 2000; i++)
        fputs("not an lmdb file ", f);
    fclose(f);
    int st;
    cr_assert_null(open_ro(p, reg, &st));
    cr_assert_eq(st, PL_ECORRUPT, "%s", pl_errmsg());

    /* an empty file */
    snprintf(p, sizeof p, "%s/empty", t_tmpdir());
    f = fopen(p, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_null(open_ro(p, reg, &st));
    cr_assert_eq(st, PL_ECORRUPT, "%s", pl_errmsg());
    struct stat sb;
    cr_assert_eq(stat(p, &sb), 0);
    cr_assert_eq(sb.st_size, 0, "the file is left as it was");
    pl_registry_free(reg);
}

Test(readonly, reads_but_never_writes, .fini = t_cleanup)
{
    const char *path = t_store_path();
    make_store(path);
    pl_registry *reg = t_registry();
    int st;
    pl_engine *e = open_ro(path, reg, &st);
    cr_assert_not_null(e, "%s", pl_errmsg());

    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "r1"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_null(info->resume_token);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, "r1"), PL_OK, "%s", pl_errmsg());

    /* starting or continuing a run is refused, and nothing changes */
    pl_action root = PL_ACTION_INIT;
    root.policy = "echo";
    root.payload = pl_json_empty();
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_start(&o, e, &root, NULL), PL_ESTATE);
    cr_assert(strstr(pl_errmsg(), "read-only"), "%s", pl_errmsg());
    cr_assert_null(o);
    /* a completed run is final: continuing it replays and writes nothing */
    cr_assert_eq(pl_run_continue(&o, e, "r1", NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_assert_eq(o->steps_appended, 0);
    pl_outcome_free(o);
    /* retrying a failed run would write: refused, the record unchanged */
    o = NULL;
    cr_assert_eq(pl_run_continue(&o, e, "failed", NULL), PL_ESTATE, "%s",
                 pl_errmsg());
    cr_assert_null(o);
    cr_assert_eq(pl_run_get(&info, e, "failed"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_FAILED);
    cr_assert_eq(info->attempts, 1);
    pl_run_info_free(info);
    /* a fork and an upgrade would write a run: refused as runs.h says */
    char *id = NULL;
    cr_assert_eq(pl_run_fork(&id, e, "r1", "0:1", "r1-fork"), PL_ESTATE, "%s",
                 pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "read-only"), "%s", pl_errmsg());
    cr_assert_null(id);
    cr_assert_eq(pl_run_upgrade(&id, e, "failed", "0:0", "failed-v2"),
                 PL_ESTATE, "%s", pl_errmsg());
    cr_assert(strstr(pl_errmsg(), "read-only"), "%s", pl_errmsg());
    cr_assert_null(id);
    cr_assert_eq(status_of(e, "failed"), PL_RUN_FAILED);
    pl_engine_close(e);

    /* a writer sees just the two runs */
    e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_store_stats ss = {.version = PL_STORE_STATS_VERSION};
    cr_assert_eq(pl_engine_stats(&ss, e), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(ss.runs, 2);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* The headers of the functions the guide's Time and events and Schedules
 * name: each one that would write is PL_ESTATE on a read-only engine,
 * whatever the store holds (here nothing due, no schedule), and nothing
 * changes; reading the schedules works. */
Test(readonly, the_writers_of_time_and_schedules_are_refused, .fini = t_cleanup,
     .timeout = 60)
{
    const char *path = t_store_path();
    make_store(path);
    pl_registry *reg = t_registry();
    pl_action root = PL_ACTION_INIT;
    root.policy = "echo";
    root.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "live"; /* a run an event or a cancellation would change */
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    cr_assert_eq(pl_run_submit(NULL, e, &root, &ro), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    int st;
    e = open_ro(path, reg, &st);
    cr_assert_not_null(e, "%s", pl_errmsg());
    ro.run_id = "queued";
    cr_expect_eq(pl_run_submit(NULL, e, &root, &ro), PL_ESTATE);
    int64_t next = -1;
    cr_expect_eq(pl_engine_wake(e, &next), PL_ESTATE);
    cr_expect_eq(pl_schedule_fire(e, 1767225600000LL, NULL, NULL), PL_ESTATE);
    pl_schedule sc = PL_SCHEDULE_INIT;
    sc.name = "nightly";
    sc.cron = "30 2 * * *";
    sc.policy = "echo";
    cr_expect_eq(pl_schedule_put(e, &sc), PL_ESTATE);
    cr_expect_eq(pl_schedule_delete(e, "nightly"), PL_ESTATE);
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, 1767225600000LL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(cJSON_GetArraySize(list), 0);
    cJSON_Delete(list);
    cr_expect_eq(pl_worker_run(e, NULL), PL_ESTATE);
    cJSON *p = t_json("{}");
    pl_outcome *o = NULL;
    st = pl_run_signal(&o, e, "failed", "go", p);
    cr_expect_eq(st, PL_ESTATE, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_expect_null(o);
    cJSON_Delete(p);
    st = pl_run_cancel(e, "failed", "stop");
    cr_expect_eq(st, PL_ESTATE, "%s: %s", pl_status_name(st), pl_errmsg());
    p = t_json("{}");
    st = pl_run_signal(&o, e, "live", "go", p);
    cr_expect_eq(st, PL_ESTATE, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "read-only"), "%s", pl_errmsg());
    cJSON_Delete(p);
    st = pl_run_cancel(e, "live", "stop");
    cr_expect_eq(st, PL_ESTATE, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "read-only"), "%s", pl_errmsg());
    pl_engine_close(e);
    e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_store_stats ss = {.version = PL_STORE_STATS_VERSION};
    cr_assert_eq(pl_engine_stats(&ss, e), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ss.runs, 3, "nothing was written");
    cr_expect_eq(status_of(e, "failed"), PL_RUN_FAILED);
    cr_expect_eq(status_of(e, "live"), PL_RUN_SUBMITTED);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(readonly, reads_while_another_process_writes, .fini = t_cleanup)
{
    const char *path = t_store_path();
    make_store(path);
    pl_registry *reg = t_registry();
    int st;
    pl_engine *ro = open_ro(path, reg, &st);
    cr_assert_not_null(ro, "%s", pl_errmsg());
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        pl_engine *w = NULL;
        if (pl_engine_open(&w, path, reg, NULL))
            _exit(2);
        pl_outcome *o = NULL;
        pl_action root = PL_ACTION_INIT;
        root.policy = "chain";
        root.payload = pl_json_empty();
        pl_run_options opts = PL_RUN_OPTIONS_INIT;
        opts.run_id = "r2";
        int rc = pl_run_start(&o, w, &root, &opts);
        pl_outcome_free(o);
        pl_engine_close(w);
        _exit(rc ? 3 : 0);
    }
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the writer failed");
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, ro, "r2"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(ro, "r2"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(ro);
    pl_registry_free(reg);
}

Test(readonly, version_1_options_still_open_writable, .fini = t_cleanup)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.version = 1;
    o.read_only = true; /* past the end of a version 1 struct: not read */
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(t_start(e, "echo", "{}", "r1"));
    pl_engine_close(e);
    o.version = PL_ENGINE_OPTIONS_VERSION + 1;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_EINVAL);
    pl_registry_free(reg);
}

typedef struct hashes {
    size_t n, with_hash;
    char ids[64][32];
    uint8_t hash[64][PL_HASH_LEN];
    uint8_t prev[64][PL_HASH_LEN];
    bool has[64];
} hashes;

static int collect(const pl_step *s, void *user)
{
    hashes *h = user;
    cr_assert_lt(h->n, 64);
    snprintf(h->ids[h->n], sizeof h->ids[0], "%s", pl_step_id(s));
    h->has[h->n] = pl_step_hash(h->hash[h->n], s) == PL_OK;
    cr_assert_eq(pl_step_prev_hash(h->prev[h->n], s), PL_OK);
    h->with_hash += h->has[h->n];
    h->n++;
    return 0;
}

Test(step_hash, links_each_step_to_the_next, .fini = t_cleanup)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_outcome_free(t_start(e, "chain", "{\"n\": 3}", "r1"));
    hashes h;
    memset(&h, 0, sizeof h);
    cr_assert_eq(pl_run_walk(e, "r1", collect, &h), PL_OK, "%s", pl_errmsg());
    cr_assert_gt(h.with_hash, 0);
    /* in the root ledger, each step's prev is its predecessor's hash */
    size_t checked = 0, last = SIZE_MAX;
    for (size_t i = 0; i < h.n; i++) {
        if (strncmp(h.ids[i], "0:", 2) != 0)
            continue;
        if (last != SIZE_MAX) {
            cr_assert(h.has[last], "root step %s has a hash", h.ids[last]);
            cr_assert_eq(memcmp(h.prev[i], h.hash[last], PL_HASH_LEN), 0,
                         "%s links %s", h.ids[i], h.ids[last]);
            checked++;
        }
        last = i;
    }
    cr_assert_gt(checked, 2);
    /* the root's last step is the run's head */
    uint8_t head[PL_HASH_LEN];
    cr_assert_eq(pl_run_head(head, e, "r1"), PL_OK);
    cr_assert_eq(memcmp(head, h.hash[last], PL_HASH_LEN), 0);

    /* pl_run_ledger() gives the same hashes */
    pl_steps *l = NULL;
    cr_assert_eq(pl_run_ledger(&l, e, "r1", "0"), PL_OK);
    uint8_t x[PL_HASH_LEN];
    const pl_step *tail = pl_steps_at(l, pl_steps_count(l) - 1);
    cr_assert_eq(pl_step_hash(x, tail), PL_OK);
    cr_assert_eq(memcmp(x, head, PL_HASH_LEN), 0);
    pl_steps_free(l);

    /* a step a policy makes has none */
    pl_steps *mine = NULL;
    cr_assert_eq(pl_steps_new(&mine), PL_OK);
    cr_assert_eq(pl_steps_add_text(mine, "me", "hi"), PL_OK);
    cr_assert_eq(pl_step_hash(x, pl_steps_at(mine, 0)), PL_ENOTFOUND);
    cr_assert_eq(pl_step_prev_hash(x, pl_steps_at(mine, 0)), PL_ENOTFOUND);
    cr_assert_eq(pl_step_hash(NULL, pl_steps_at(mine, 0)), PL_EINVAL);
    pl_steps_free(mine);

    /* a one-step callee is folded into its caller's action_result: its
     * step is not stored on its own, so it has no hash of its own */
    cr_assert_eq(pl_run_ledger(&l, e, "r1", "0.0"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_steps_count(l), 1, "a one-step callee");
    cr_expect_eq(pl_step_hash(x, pl_steps_at(l, 0)), PL_ENOTFOUND);
    pl_steps_free(l);
    pl_engine_close(e);
    pl_registry_free(reg);
}

static int human_root(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)a;
    (void)out;
    (void)user;
    cJSON *answer = NULL;
    int st = pl_ctx_invoke(&answer, ctx, "human", pl_json_empty());
    cJSON_Delete(answer);
    return st;
}

Test(run_info, carries_a_suspended_runs_resume_token, .fini = t_cleanup)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "ask", human_root, NULL), PL_OK);
    cr_assert_eq(pl_registry_add_human(reg, "human"), PL_OK);
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_outcome *o = t_start(e, "ask", "{}", "r1");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "r1"), PL_OK, "%s", pl_errmsg());
    cr_assert_not_null(info->resume_token);
    cr_assert_str_eq(info->resume_token, o->resume_token);
    pl_run_info_free(info);

    /* resuming with it works, and a completed run has none */
    pl_outcome *done = NULL;
    cr_assert_eq(pl_run_resume(&done, e, "r1", o->resume_token,
                               pl_json_empty()),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(done->status, PL_RUN_COMPLETED);
    cr_assert_eq(pl_run_get(&info, e, "r1"), PL_OK);
    cr_assert_null(info->resume_token);
    pl_run_info_free(info);
    pl_outcome_free(done);
    pl_outcome_free(o);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(stats, counts_runs_steps_and_pages, .fini = t_cleanup)
{
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    pl_store_stats ss = {.version = PL_STORE_STATS_VERSION};
    cr_assert_eq(pl_engine_stats(&ss, e), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(ss.runs, 0);
    cr_assert_eq(ss.step_records, 0);
    pl_outcome_free(t_start(e, "chain", "{\"n\": 3}", "r1"));
    pl_outcome_free(t_start(e, "echo", "{}", "r2"));
    cr_assert_eq(pl_engine_stats(&ss, e), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(ss.runs, 2);
    cr_assert_gt(ss.step_records, 3);
    cr_assert_gt(ss.page_size, 0);
    cr_assert_gt(ss.used_pages, 0);
    cr_assert_geq(ss.file_bytes, ss.used_pages * ss.page_size);
    cr_assert_geq(ss.map_bytes, ss.file_bytes);
    cr_assert_lt(ss.free_pages, ss.used_pages);

    pl_store_stats bad = {.version = 99};
    cr_assert_eq(pl_engine_stats(&bad, e), PL_EINVAL);
    cr_assert_eq(pl_engine_stats(NULL, e), PL_EINVAL);
    pl_engine_close(e);
    pl_registry_free(reg);
}
