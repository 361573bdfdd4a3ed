/*
 * replay_helper.c -- what ledger-replay's tests need done to a store that
 * the tool itself does not do (it never starts a run):
 *
 *   replay-helper start STORE PLUGIN POLICY RUN_ID JSON
 *       start a run of POLICY (from PLUGIN) and print its status
 *   replay-helper hold STORE RUN_ID [LEASE_MS]
 *       start a run that stays inside a call: it prints "waiting" and
 *       blocks until its stdin is closed, then completes; its engine's
 *       lease is LEASE_MS (default: the engine's)
 *   replay-helper verify STORE RUN_ID
 *       pl_run_verify(): print "ok", or the fault and exit 1
 *   replay-helper head STORE RUN_ID
 *       print the run's head hash in hex
 *   replay-helper schedule STORE NAME CRON POLICY SECONDS_AGO
 *       put schedule NAME with its ticks counted from SECONDS_AGO ago
 *       (pl_schedule.start_ms, which the tool does not offer): a tick
 *       missed, due with no worker to fire it
 *
 * Exit: 0 done, 1 a check failed, 2 the store, plugin or run failed.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <policyledger.h>

static int wait_for_stdin(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                          void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    printf("waiting\n");
    fflush(stdout);
    char buf[256];
    while (read(STDIN_FILENO, buf, sizeof buf) > 0)
        ;
    return pl_steps_add_resultf(out, "{s:b}", "released", 1);
}

static int hold(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *r = NULL;
    int st = pl_ctx_invoke(&r, ctx, "wait", pl_json_empty());
    if (!st)
        st = pl_steps_add_result(out, r);
    cJSON_Delete(r);
    return st;
}

static int fail(const char *what)
{
    fprintf(stderr, "replay-helper: %s: %s\n", what, pl_errmsg());
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: replay-helper start|hold|verify|head STORE "
                        "...\n");
        return 2;
    }
    const char *cmd = argv[1], *store = argv[2];
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    pl_outcome *o = NULL;
    cJSON *payload = NULL;
    int rc = 2;
    if (pl_registry_new(&reg)) {
        rc = fail("registry");
        goto done;
    }
    if (!strcmp(cmd, "start") && argc == 7 && pl_plugin_load(reg, argv[3])) {
        rc = fail(argv[3]);
        goto done;
    }
    if (!strcmp(cmd, "hold")) {
        if (pl_registry_add_fn(reg, "hold", hold, NULL) ||
            pl_registry_add_fn(reg, "wait", wait_for_stdin, NULL)) {
            rc = fail("registry");
            goto done;
        }
    }
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    if (!strcmp(cmd, "hold") && argc == 5) {
        char *end;
        errno = 0;
        long ms = strtol(argv[4], &end, 10);
        if (errno || end == argv[4] || *end || ms <= 0 || ms > 3600000) {
            fprintf(stderr, "replay-helper: bad lease '%s'\n", argv[4]);
            goto done;
        }
        eo.lease_ms = (unsigned)ms;
    }
    if (pl_engine_open(&e, store, reg, &eo)) {
        rc = fail(store);
        goto done;
    }
    if (!strcmp(cmd, "start") && argc == 7) {
        payload = cJSON_Parse(argv[6]);
        pl_action root = PL_ACTION_INIT;
        root.policy = argv[4];
        root.payload = payload;
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = argv[5];
        if (!payload || pl_run_start(&o, e, &root, &ro)) {
            rc = fail("start");
            goto done;
        }
        printf("%s\n", pl_run_status_name(o->status));
        rc = 0;
    } else if (!strcmp(cmd, "hold") && (argc == 4 || argc == 5)) {
        pl_action root = PL_ACTION_INIT;
        root.policy = "hold";
        root.payload = pl_json_empty();
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = argv[3];
        if (pl_run_start(&o, e, &root, &ro)) {
            rc = fail("hold");
            goto done;
        }
        printf("%s\n", pl_run_status_name(o->status));
        rc = o->status == PL_RUN_COMPLETED ? 0 : 2;
    } else if (!strcmp(cmd, "verify") && argc == 4) {
        if (pl_run_verify(e, argv[3])) {
            printf("%s\n", pl_errmsg());
            rc = 1;
        } else {
            printf("ok\n");
            rc = 0;
        }
    } else if (!strcmp(cmd, "head") && argc == 4) {
        uint8_t h[PL_HASH_LEN];
        if (pl_run_head(h, e, argv[3])) {
            rc = fail("head");
            goto done;
        }
        for (size_t i = 0; i < PL_HASH_LEN; i++)
            printf("%02x", h[i]);
        printf("\n");
        rc = 0;
    } else if (!strcmp(cmd, "schedule") && argc == 7) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        char *end;
        errno = 0;
        long long ago_s = strtoll(argv[6], &end, 10);
        if (errno || end == argv[6] || *end || ago_s < 0 ||
            ago_s > 100LL * 366 * 86400) {
            fprintf(stderr, "replay-helper: bad seconds '%s'\n", argv[6]);
            goto done;
        }
        pl_schedule sc = PL_SCHEDULE_INIT;
        sc.name = argv[3];
        sc.cron = argv[4];
        sc.policy = argv[5];
        sc.start_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 -
                      (int64_t)ago_s * 1000;
        if (pl_schedule_put(e, &sc)) {
            rc = fail("schedule");
            goto done;
        }
        printf("ok\n");
        rc = 0;
    } else {
        fprintf(stderr, "replay-helper: bad arguments\n");
    }
done:
    pl_outcome_free(o);
    cJSON_Delete(payload);
    pl_engine_close(e);
    pl_registry_free(reg);
    return rc;
}
