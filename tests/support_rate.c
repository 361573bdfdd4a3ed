/*
 * support_rate.c -- what the tests of rate limits share (support_rate.h).
 */
#include "support_rate.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

char rt_dir[512];

void rt_setup(void) { snprintf(rt_dir, sizeof rt_dir, "%s", t_tmpdir()); }

static void rt_nap(long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

int rt_sleep(int64_t ms, void *user)
{
    (void)user;
    char p[600];
    snprintf(p, sizeof p, "%s/waiting", rt_dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    rt_nap((long)ms);
    return PL_OK;
}

static pl_engine_options rt_options(void)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.lease_ms = 300;
    return o;
}

pl_engine *rt_engine(const char *path, const pl_registry *reg)
{
    pl_engine_options o = rt_options();
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    return e;
}

void rt_child_run(const char *path, const pl_registry *reg, const char *policy,
                  const char *payload_json, const char *id)
{
    pl_engine_options eo = rt_options();
    pl_engine *e = NULL;
    if (pl_engine_open(&e, path, reg, &eo))
        _exit(2);
    pl_action a = PL_ACTION_INIT;
    a.policy = policy;
    a.payload = cJSON_Parse(payload_json);
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    int st = a.payload ? pl_run_start(&o, e, &a, &ro) : PL_EINVAL;
    _exit(!st && o->status == PL_RUN_COMPLETED ? 0 : 1);
}

void rt_kill_in_wait(pid_t kid)
{
    char p[600];
    snprintf(p, sizeof p, "%s/waiting", rt_dir);
    for (int ms = 0; access(p, F_OK) != 0; ms += 5) {
        cr_assert_lt(ms, 60000, "the run never waited");
        rt_nap(5);
    }
    kill(kid, SIGKILL);
    cr_assert_eq(waitpid(kid, NULL, 0), kid);
}

void rt_continue_to_end(pl_engine *e, const char *id)
{
    pl_outcome *o = NULL;
    int st;
    while ((st = pl_run_continue(&o, e, id, NULL)) == PL_EBUSY)
        rt_nap(20);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason);
    pl_outcome_free(o);
}
