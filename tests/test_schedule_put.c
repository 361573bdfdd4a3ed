/*
 * test_schedule_put.c -- what pl_schedule_put() refuses so that no fire of
 * the schedule could fail for it afterwards (core/engine/schedule.c): a
 * payload its ticks' runs could not be submitted with, a schedule past the
 * most a store keeps.  On LMDB, and PostgreSQL as pg_test_schedule_put.
 */
#include "support.h"

#include <stdio.h>
#include <string.h>

#define MIN_MS 60000LL
/* 2026-01-01T00:00Z: the ticks of "* * * * *" after it are T0 + k min */
#define T0 1767225600000LL

static pl_registry *s_reg; /* the open engine's */

static void s_close(pl_engine *e)
{
    pl_engine_close(e);
    pl_registry_free(s_reg);
    s_reg = NULL;
}

/* A payload nested @p depth objects deep ({"a":{"a":...1}}), parsed. */
static cJSON *nested(int depth)
{
    char text[1024];
    size_t n = 0;
    for (int i = 0; i < depth - 1; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "{\"a\":");
    n += (size_t)snprintf(text + n, sizeof text - n, "{\"a\":1}");
    for (int i = 0; i < depth - 1; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "}");
    cr_assert_lt(n, sizeof text);
    return t_json(text);
}

/* pl_schedule_put() takes only a payload each tick's run can be submitted
 * with, as pl_run_submit() checks a root payload: one nested deeper than
 * PL_MAX_JSON_DEPTH, or larger than the engine's max_payload, was taken
 * and then failed every fire of the schedule, for good. */
Test(schedule_put, a_payload_no_tick_could_submit_is_refused)
{
    s_reg = t_registry();
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.max_payload = 1024;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, t_store_path(), s_reg, &eo), PL_OK, "%s",
                 pl_errmsg());
    char big[1200];
    snprintf(big, sizeof big, "{\"s\":\"%01100d\"}", 0);
    cJSON *bad[] = {nested(PL_MAX_JSON_DEPTH + 1), t_json(big)};
    for (size_t i = 0; i < 2; i++) {
        pl_schedule s = PL_SCHEDULE_INIT;
        s.name = "x";
        s.cron = "* * * * *";
        s.policy = "echo";
        s.payload = bad[i];
        s.start_ms = T0;
        cr_expect_eq(pl_schedule_put(e, &s), PL_ELIMIT, "case %zu: %s", i,
                     pl_errmsg());
        cr_expect(strncmp(pl_errmsg(), "schedule 'x': ", 14) == 0,
                  "case %zu: '%s'", i, pl_errmsg());
        cJSON_Delete(bad[i]);
    }
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK);
    cr_expect_eq(cJSON_GetArraySize(list), 0, "nothing was written");
    cJSON_Delete(list);
    /* the deepest a run takes is taken, and its tick's run starts */
    pl_schedule s = PL_SCHEDULE_INIT;
    s.name = "deepest";
    s.cron = "* * * * *";
    s.policy = "echo";
    cJSON *p = nested(PL_MAX_JSON_DEPTH);
    s.payload = p;
    s.start_ms = T0;
    cr_assert_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
    size_t n = 0;
    cr_expect_eq(pl_schedule_fire(e, T0 + MIN_MS + 1000, &n, NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_expect_eq(n, 1);
    pl_run_info *ri = NULL;
    cr_expect_eq(pl_run_get(&ri, e, "deepest@2026-01-01T00:01Z"), PL_OK, "%s",
                 pl_errmsg());
    pl_run_info_free(ri);
    s_close(e);
}

/* A store keeps at most 4096 schedules (PL__SCHED_MAX), and reads more as
 * a damaged store: a put past them was taken, and then every list, fire,
 * put and delete failed with PL_ECORRUPT, every schedule stopped firing
 * and none could be deleted to mend it.  The put past them is refused;
 * one that replaces a schedule, or comes after a delete, is taken. */
Test(schedule_put, a_put_past_the_most_schedules_a_store_keeps_is_refused,
     .timeout = 300)
{
    t_lmdb_only("4096 puts, each reading every schedule: the check is the "
                "engine's, the same on either store");
    s_reg = t_registry();
    pl_engine *e = t_engine(t_store_path(), s_reg, PL_DURABILITY_PROCESS);
    pl_schedule s = PL_SCHEDULE_INIT;
    s.cron = "0 0 1 1 *";
    s.policy = "echo";
    char name[32];
    for (int i = 0; i < 4096; i++) {
        snprintf(name, sizeof name, "s%04d", i);
        s.name = name;
        cr_assert_eq(pl_schedule_put(e, &s), PL_OK, "%s: %s", name,
                     pl_errmsg());
    }
    s.name = "one-more";
    cr_expect_eq(pl_schedule_put(e, &s), PL_ELIMIT, "%s", pl_errmsg());
    cr_expect(strstr(pl_errmsg(), "4096"), "%s", pl_errmsg());
    /* the store reads as it was, and goes on */
    cJSON *list = NULL;
    cr_assert_eq(pl_schedule_list(&list, e, T0), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(cJSON_GetArraySize(list), 4096);
    cJSON_Delete(list);
    cr_expect_eq(pl_schedule_fire(e, T0, NULL, NULL), PL_OK, "%s", pl_errmsg());
    s.name = "s0000"; /* replaced: still 4096 */
    s.cron = "0 0 2 1 *";
    cr_expect_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_schedule_delete(e, "s0001"), PL_OK, "%s", pl_errmsg());
    s.name = "one-more";
    cr_expect_eq(pl_schedule_put(e, &s), PL_OK, "%s", pl_errmsg());
    s_close(e);
}
