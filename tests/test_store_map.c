/*
 * test_store_map.c -- the LMDB store's map: growth, a map that may not grow
 * (also under group commit), and the zeroed tail a syncing store keeps.
 */
#include "support.h"
#include "support_store.h"

#include "codec.h"
#include "hash.h"
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- map size ------------------------------------------------------------ */

/* Check a "bulk" run's ledger: n calls, each echoing its blob. */
static void bulk_intact(pl_engine *e, const char *id, int n, int size)
{
    cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s: %s", id, pl_errmsg());
    pl_steps *l;
    cr_assert_eq(pl_run_ledger(&l, e, id, "0"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_steps_count(l), (size_t)(2 * n + 1));
    for (int i = 0; i < n; i++) {
        const cJSON *p = pl_step_payload(pl_steps_at(l, (size_t)(2 * i + 1)));
        const cJSON *blob = cJSON_GetObjectItemCaseSensitive(p, "blob");
        cr_assert(cJSON_IsString(blob));
        cr_assert_eq(strlen(blob->valuestring), (size_t)size);
        cr_assert_eq(blob->valuestring[0], (char)('a' + i % 26));
        cr_assert_eq(cJSON_GetObjectItemCaseSensitive(p, "i")->valueint, i);
    }
    pl_steps_free(l);
}

Test(store, map_grows_past_its_initial_size, .timeout = 300)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, (size_t)64 << 10, 0);
    /* about 3 MB into a 64 KiB map */
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "big-%d", i);
        start_ok(e, "bulk", "{\"n\": 16, \"size\": 16384}", id);
    }
    for (int i = 0; i < 50; i++) {
        char id[16];
        snprintf(id, sizeof id, "small-%02d", i);
        start_ok(e, "chain", "{\"n\": 2}", id);
    }
    cr_assert_gt(file_size(path), (off_t)1 << 20);
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "big-%d", i);
        bulk_intact(e, id, 16, 16384);
    }
    pl_engine_close(e);

    /* reopened with the same small map size, everything reads back */
    e = open_with(path, reg, (size_t)64 << 10, 0);
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "big-%d", i);
        bulk_intact(e, id, 16, 16384);
    }
    for (int i = 0; i < 50; i++) {
        char id[16];
        snprintf(id, sizeof id, "small-%02d", i);
        cr_assert_eq(pl_run_verify(e, id), PL_OK, "%s", pl_errmsg());
        cr_assert_eq(walk_count(e, id), 5 + 2);
    }
    /* and it keeps growing */
    start_ok(e, "bulk", "{\"n\": 8, \"size\": 65536}", "bigger");
    bulk_intact(e, "bigger", 8, 65536);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* ---- the zeroed tail ------------------------------------------------------ */

/* The bytes LMDB uses of a store file: up to the end of its last page. */
static off_t raw_used(const char *path)
{
    raw r;
    MDB_envinfo info;
    MDB_stat ms;
    raw_open(&r, path, false);
    cr_assert_eq(mdb_env_info(r.env, &info), 0);
    cr_assert_eq(mdb_env_stat(r.env, &ms), 0);
    raw_close(&r); /* writes nothing: the transaction changed nothing */
    return ((off_t)info.me_last_pgno + 1) * (off_t)ms.ms_psize;
}

/* Every byte of @p path from @p from to its end is zero. */
static bool zeros_from(const char *path, off_t from)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fseeko(f, from, SEEK_SET), 0);
    int c;
    while ((c = fgetc(f)) != EOF && c == 0)
        ;
    fclose(f);
    return c == EOF;
}

Test(store, a_syncing_store_keeps_a_zeroed_tail)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_sized(path, reg, PL_DURABILITY_SYNC, 0, 0);
    start_ok(e, "bulk", "{\"n\": 8, \"size\": 16384}", "first");
    pl_engine_close(e);
    /* past LMDB's last page, at least half a tail of 1 MiB, all zeros */
    off_t used = raw_used(path), size = file_size(path);
    cr_assert_geq(size, used + (512 << 10), "used %lld, file %lld",
                  (long long)used, (long long)size);
    cr_assert_leq(size, used + (1 << 20), "used %lld, file %lld",
                  (long long)used, (long long)size);
    cr_assert(zeros_from(path, used));

    /* growing past it (about 1.6 MB more) writes a new one */
    e = open_sized(path, reg, PL_DURABILITY_SYNC, 0, 0);
    start_ok(e, "bulk", "{\"n\": 48, \"size\": 32768}", "second");
    bulk_intact(e, "first", 8, 16384);
    bulk_intact(e, "second", 48, 32768);
    pl_engine_close(e);
    off_t used2 = raw_used(path), size2 = file_size(path);
    cr_assert_gt(used2, size, "the data went past the first tail");
    cr_assert_geq(size2, used2 + (512 << 10));
    cr_assert(zeros_from(path, used2));

    /* a store that does not sync keeps none */
    const char *other = t_store_path();
    e = open_sized(other, reg, PL_DURABILITY_PROCESS, 0, 0);
    start_ok(e, "bulk", "{\"n\": 8, \"size\": 16384}", "first");
    pl_engine_close(e);
    cr_assert_eq(file_size(other), raw_used(other));
    pl_registry_free(reg);
}

/* A file size limit that the tail would pass: SIGXFSZ ignored, its write
 * fails with EFBIG, as on a full disk. */
Test(store, a_tail_that_cannot_be_written_costs_no_commit)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        struct rlimit rl = {256 << 10, 256 << 10};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl))
            _exit(3);
        pl_engine *ce = t_engine(path, reg, PL_DURABILITY_SYNC);
        pl_outcome *o = t_start(ce, "chain", "{\"n\": 40}", "limited");
        int ok = o->status == PL_RUN_COMPLETED &&
                 pl_run_verify(ce, "limited") == PL_OK;
        pl_outcome_free(o);
        pl_engine_close(ce);
        _exit(ok ? 0 : 4);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the run under the limit failed (status %d)", status);
    /* the failed tail was cut back: only LMDB's pages are left */
    cr_assert_eq(file_size(path), raw_used(path));
    pl_engine *e = open_sized(path, reg, PL_DURABILITY_SYNC, 0, 0);
    cr_assert_eq(pl_run_verify(e, "limited"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(walk_count(e, "limited"), 3 * 40 + 1);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A new store whose first map cannot hold its databases (map_size 4 KiB:
 * one page) grows it as any write does, and runs; one whose map_size_max
 * is below them is refused with the message of a store that may not grow,
 * and a later open with room makes the store. */
Test(store, a_map_too_small_for_a_new_store_grows_at_open)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.map_size = 4096;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    start_ok(e, "chain", "{\"n\": 3}", "small");
    cr_assert_eq(pl_run_verify(e, "small"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);

    char path2[4200];
    t_store_in(path2, sizeof path2, t_tmpdir(), "store2.db");
    o.map_size_max = 8192;
    e = NULL;
    int st = pl_engine_open(&e, path2, reg, &o);
    cr_assert_eq(st, PL_EMAPFULL, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert_null(e);
    cr_assert(strstr(pl_errmsg(), "may not grow past map_size_max"), "%s",
              pl_errmsg());
    e = open_with(path2, reg, 0, 0);
    start_ok(e, "chain", "{\"n\": 2}", "later");
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A map_size above map_size_max asks for a first map that may not be:
 * refused, naming both, and nothing is created; the default map_size
 * (64 MiB) under a smaller map_size_max is that maximum. */
Test(store, a_map_size_above_its_maximum_is_refused)
{
    pl_registry *reg = registry();
    char path[4200];
    t_store_in(path, sizeof path, t_tmpdir(), "store.db");
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.map_size = (size_t)8 << 20;
    o.map_size_max = (size_t)1 << 20;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, path, reg, &o);
    cr_assert_eq(st, PL_EINVAL, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert_null(e);
    cr_expect(strstr(pl_errmsg(), "map_size 8388608") &&
                  strstr(pl_errmsg(), "map_size_max 1048576"),
              "%s", pl_errmsg());
    if (!t_on_pg())
        cr_expect_eq(access(path, F_OK), -1, "nothing was created");
    o.map_size = 0;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    start_ok(e, "chain", "{\"n\": 2}", "fits");
    pl_store_stats ss = PL_STORE_STATS_INIT;
    cr_assert_eq(pl_engine_stats(&ss, e), PL_OK, "%s", pl_errmsg());
    if (!t_on_pg())
        cr_expect_leq(ss.map_bytes, (uint64_t)1 << 20, "%llu",
                      (unsigned long long)ss.map_bytes);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A map_size no process can map (3/4 of the address space) is refused
 * with PL_ENOMEM naming map_size, not as a store out of memory. */
Test(store, a_map_size_that_cannot_be_mapped_is_named)
{
    t_lmdb_only("the map is LMDB's");
    pl_registry *reg = registry();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.map_size = SIZE_MAX / 4 * 3;
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, t_store_path(), reg, &o);
    cr_assert_eq(st, PL_ENOMEM, "%s: %s", pl_status_name(st), pl_errmsg());
    cr_assert_null(e);
    cr_expect(strstr(pl_errmsg(), "(map_size)"), "%s", pl_errmsg());
    pl_registry_free(reg);
}

Test(store, full_map_that_may_not_grow, .timeout = 300)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    size_t max = (size_t)1 << 20;
    pl_engine *e = open_with(path, reg, (size_t)256 << 10, max);
    start_ok(e, "chain", "{\"n\": 3}", "early");
    start_ok(e, "bulk", "{\"n\": 2, \"size\": 1000}", "early-bulk");

    cJSON *p = t_json("{\"n\": 100, \"size\": 32768}");
    pl_action a = {PL_ACTION_VERSION, "bulk", p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = "too-big";
    pl_outcome *o = NULL;
    int st = pl_run_start(&o, e, &a, &ro);
    cJSON_Delete(p);
    /* documented: PL_EMAPFULL, no outcome, nothing durable lost */
    cr_assert_eq(st, PL_EMAPFULL, "pl_run_start gave %s: %s",
                 pl_status_name(st), pl_errmsg());
    cr_assert_null(o);
    cr_assert(strstr(pl_errmsg(), "full") != NULL, "%s", pl_errmsg());
    cr_assert_leq(file_size(path), (off_t)max, "the file grew past the max");

    /* what was written before is all there */
    cr_assert_eq(pl_run_verify(e, "early"), PL_OK, "%s", pl_errmsg());
    bulk_intact(e, "early-bulk", 2, 1000);
    /* and so is what the failed run made durable before the map filled */
    cr_assert_eq(pl_run_verify(e, "too-big"), PL_OK, "%s", pl_errmsg());
    pl_steps *l;
    cr_assert_eq(pl_run_ledger(&l, e, "too-big", "0"), PL_OK);
    size_t kept = pl_steps_count(l);
    cr_assert_gt(kept, 0, "some calls were durable before the map filled");
    cr_assert_lt(kept, 200);
    cr_assert_eq(kept % 2, 0, "whole calls only");
    int64_t first_time = pl_step_time_us(pl_steps_at(l, 0));
    pl_steps_free(l);
    pl_run_info *info;
    cr_assert_eq(pl_run_get(&info, e, "too-big"), PL_OK);
    cr_assert_neq(info->status, PL_RUN_COMPLETED);
    cr_assert_not(info->owner_alive, "nothing runs it any more");
    pl_run_info_free(info);
    /* more writes still fail cleanly */
    o = NULL;
    cJSON *p2 = t_json("{\"n\": 40, \"size\": 32768}");
    pl_action a2 = {PL_ACTION_VERSION, "bulk", p2, NULL, 0, NULL};
    st = pl_run_start(&o, e, &a2, NULL);
    cJSON_Delete(p2);
    cr_assert_eq(st, PL_EMAPFULL, "%s", pl_status_name(st));
    cr_assert_null(o);
    pl_engine_close(e);

    /* reopened: still all there; with room to grow the run finishes,
     * serving the calls it had already made */
    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "early"), PL_OK, "%s", pl_errmsg());
    bulk_intact(e, "early-bulk", 2, 1000);
    cr_assert_eq(pl_run_verify(e, "too-big"), PL_OK, "%s", pl_errmsg());
    o = NULL;
    st = pl_run_continue(&o, e, "too-big", NULL);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cr_assert_eq(o->calls_served, kept / 2);
    cr_assert_eq(o->calls_executed, 100 - kept / 2);
    pl_outcome_free(o);
    bulk_intact(e, "too-big", 100, 32768);
    cr_assert_eq(pl_run_ledger(&l, e, "too-big", "0"), PL_OK);
    cr_assert_eq(pl_step_time_us(pl_steps_at(l, 0)), first_time,
                 "the first attempt's steps were kept, not rewritten");
    pl_steps_free(l);
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* A run started on its own thread (no Criterion asserts off the main one). */
typedef struct starter {
    pthread_t th;
    pl_engine *e;
    const char *policy;
    const char *payload;
    char id[32];
    int rc;
    pl_outcome *o;
} starter;

static void *starter_main(void *arg)
{
    starter *s = arg;
    cJSON *p = cJSON_Parse(s->payload);
    pl_action a = {PL_ACTION_VERSION, s->policy, p, NULL, 0, NULL};
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = s->id;
    s->rc = p ? pl_run_start(&s->o, s->e, &a, &ro) : PL_EINVAL;
    cJSON_Delete(p);
    return NULL;
}

/*
 * In group mode, a call whose batch can never fit the map (a 2 MB result in
 * a map that may not pass 1 MiB) fails alone with PL_EMAPFULL: the runs
 * whose batches shared its group commit are committed all the same.  Three
 * such runs start among ten small ones, so their batches usually share a
 * group with others (each is right whether or not it does).
 */
Test(store, in_group_mode_a_batch_too_big_for_the_map_fails_alone,
     .timeout = 300)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    size_t max = (size_t)1 << 20;
    pl_engine *e = open_sized(path, reg, PL_DURABILITY_GROUP, (size_t)256 << 10,
                              max);
    enum { N = 13 };
    starter st[N];
    for (int i = 0; i < N; i++) {
        bool huge = i % 4 == 3;
        st[i] = (starter){.e = e,
                          .policy = huge ? "bulk" : "chain",
                          .payload = huge ? "{\"n\": 1, \"size\": 2000000}"
                                          : "{\"n\": 30}"};
        snprintf(st[i].id, sizeof st[i].id, "%s-%d", huge ? "huge" : "small",
                 i);
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(pthread_create(&st[i].th, NULL, starter_main, &st[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(st[i].th, NULL);

    for (int i = 0; i < N; i++) {
        if (i % 4 == 3) {
            cr_assert_eq(st[i].rc, PL_EMAPFULL, "%s: %s", st[i].id,
                         pl_status_name(st[i].rc));
            cr_assert_null(st[i].o);
            continue;
        }
        cr_assert_eq(st[i].rc, PL_OK, "%s: %s", st[i].id,
                     pl_status_name(st[i].rc));
        cr_assert_eq(st[i].o->status, PL_RUN_COMPLETED, "%s", st[i].id);
        cr_assert_eq(st[i].o->calls_executed, 30);
        pl_outcome_free(st[i].o);
        cr_assert_eq(pl_run_verify(e, st[i].id), PL_OK, "%s: %s", st[i].id,
                     pl_errmsg());
    }
    cr_assert_leq(file_size(path), (off_t)max, "the file grew past the max");
    pl_engine_close(e);

    /* and all of it reads back after a reopen */
    e = open_sized(path, reg, PL_DURABILITY_SYNC, 0, 0);
    for (int i = 0; i < N; i++) {
        if (i % 4 == 3)
            continue;
        pl_run_info *info = NULL;
        cr_assert_eq(pl_run_get(&info, e, st[i].id), PL_OK);
        cr_assert_eq(info->status, PL_RUN_COMPLETED);
        pl_run_info_free(info);
        cr_assert_eq(pl_run_verify(e, st[i].id), PL_OK, "%s", pl_errmsg());
    }
    pl_engine_close(e);
    pl_registry_free(reg);
}
