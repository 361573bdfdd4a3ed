/*
 * test_renewal.c -- a process's lease renewals: every run it executes
 * keeps its lease, however many there are (LMDB: 1,100 runs at once would
 * need as many PostgreSQL connections).
 *
 * Nothing is timed but the leases: every wait is for a condition, with a
 * generous bound.
 */
#include "support.h"

#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define R_BOUND_MS 60000 /* the longest any condition is waited for */

static void r_nap(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

TestSuite(renewal, .fini = t_cleanup, .timeout = 300);

/*
 * More runs executing at once in one process than the renewer takes in one
 * transaction (1,024): every one of their leases is renewed.  1,100 runs
 * block in a call ("hold") on threads of their own, for two leases; then
 * each must still hold its lease.
 */
#define MANY 1100

static atomic_int g_held;
static int g_hold_pipe[2] = {-1, -1}; /* closing [1] lets every call end */

static int hold(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)a;
    (void)user;
    atomic_fetch_add(&g_held, 1);
    char c;
    while (read(g_hold_pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
    return pl_steps_add_resultf(out, "{}");
}

typedef struct many_run {
    pl_engine *e;
    int i, st;
} many_run;

static void *many_main(void *arg)
{
    many_run *m = arg;
    char id[32];
    snprintf(id, sizeof id, "many-%d", m->i);
    pl_action root = PL_ACTION_INIT;
    root.policy = "hold";
    root.payload = pl_json_empty();
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.run_id = id;
    pl_outcome *o = NULL;
    m->st = pl_run_start(&o, m->e, &root, &ro);
    if (!m->st && o->status != PL_RUN_COMPLETED)
        m->st = PL_EPOLICY;
    pl_outcome_free(o);
    return NULL;
}

Test(renewal, more_runs_than_one_renewal_holds_keep_their_leases,
     .timeout = 300)
{
    t_lmdb_only("1,100 runs at once, each with a connection of its own");
    const char *path = t_store_path();
    pl_registry *reg = t_registry();
    cr_assert_eq(pl_registry_add_fn(reg, "hold", hold, NULL), PL_OK, "%s",
                 pl_errmsg());
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    o.host_id = "host-a";
    o.lease_ms = 1500; /* renewed every 500 ms */
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, path, reg, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pipe(g_hold_pipe), 0);
    static many_run runs[MANY];
    static pthread_t th[MANY];
    pthread_attr_t attr;
    cr_assert_eq(pthread_attr_init(&attr), 0);
    cr_assert_eq(pthread_attr_setstacksize(&attr, (size_t)256 << 10), 0);
    for (int i = 0; i < MANY; i++) {
        runs[i] = (many_run){e, i, 0};
        cr_assert_eq(pthread_create(&th[i], &attr, many_main, &runs[i]), 0);
    }
    pthread_attr_destroy(&attr);
    for (int ms = 0; atomic_load(&g_held) < MANY; ms += 20) {
        cr_assert_lt(ms, R_BOUND_MS, "only %d runs reached their call",
                     atomic_load(&g_held));
        r_nap(20);
    }
    r_nap(3000); /* two leases: any lease not renewed has expired */
    int expired = 0;
    for (uint64_t num = 1; num <= MANY; num++) {
        pl__lease l;
        cr_assert_eq(pl__store_lease_get(e->store, num, &l), PL_OK, "%s",
                     pl_errmsg());
        expired += l.expires_in_us <= 0;
    }
    close(g_hold_pipe[1]);
    for (int i = 0; i < MANY; i++) {
        cr_assert_eq(pthread_join(th[i], NULL), 0);
        cr_expect_eq(runs[i].st, PL_OK, "run %d: %s", i,
                     pl_status_name(runs[i].st));
    }
    cr_expect_eq(expired, 0, "%d of %d leases were not renewed", expired, MANY);
    close(g_hold_pipe[0]);
    pl_engine_close(e);
    pl_registry_free(reg);
}
