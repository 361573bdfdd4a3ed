/*
 * soak.c -- the soak program that scripts/soak.sh runs, kills and restarts.
 *
 *   pl-soak run STORE EFFECTS GEN DEADLINE
 *       Rounds of RUNS runs ("soak-R-I"), all RUNS at once on a pl_pool
 *       (group durability), each run CALLS calls of "effect".  "effect"
 *       appends "R I CALL GEN" to the file EFFECTS (O_APPEND, one write)
 *       before it returns.  A round whose runs exist is continued (every
 *       run not completed yet is continued, the others skipped); a new
 *       round starts only before DEADLINE (Unix seconds; 0: none starts;
 *       -1: exactly one starts, after the rounds begun).
 *       GEN is the process's generation (the script's restart number).
 *       Exits 0 once every round it met or began is completed; prints its
 *       peak RSS.
 *
 *   pl-soak check STORE EFFECTS
 *       Every run in the store is completed with its result and verifies;
 *       every call of every run made its effect; and a call made again in
 *       a later generation was the last call its run made in the
 *       generation that first made it (the call in flight when that process
 *       was killed): nothing that finished ran twice.  Prints the figures.
 *
 * Exit codes: 0 good, 1 a check failed or a call failed, 2 usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <policyledger.h>

#define RUNS 1000
#define CALLS 100

static int g_effects = -1; /* the effects file, O_APPEND */
static long g_gen;
static volatile int g_failed; /* a task failed (set from the workers) */

static int effect(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    int round = -1, run = -1, call = -1;
    if (pl_json_unpack(a->payload, "{s:i, s:i, s:i}", "round", &round, "run",
                       &run, "call", &call))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, "bad payload");
    char line[80];
    int n = snprintf(line, sizeof line, "%d %d %d %ld\n", round, run, call,
                     g_gen);
    if (write(g_effects, line, (size_t)n) != n)
        return PL_EIO;
    return pl_steps_add_resultf(out, "{s:i}", "done", call);
}

static int soak(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)user;
    int round = -1, run = -1;
    if (pl_json_unpack(a->payload, "{s:i, s:i}", "round", &round, "run", &run))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, "bad payload");
    long sum = 0;
    for (int i = 0; i < CALLS; i++) {
        cJSON *r = NULL;
        int done = -1;
        int st = pl_ctx_invokef(&r, ctx, "effect", "{s:i, s:i, s:i}", "round",
                                round, "run", run, "call", i);
        if (!st)
            st = pl_json_unpack(r, "{s:i}", "done", &done);
        cJSON_Delete(r);
        if (st)
            return st;
        sum += done;
    }
    return pl_steps_add_resultf(out, "{s:I}", "sum", (int64_t)sum);
}

static pl_registry *registry(void)
{
    pl_registry *reg = NULL;
    if (pl_registry_new(&reg))
        return NULL;
    int st = pl_registry_add_fn(reg, "soak", soak, NULL);
    if (!st)
        st = pl_registry_add_fn(reg, "effect", effect, NULL);
    if (st) {
        pl_registry_free(reg);
        return NULL;
    }
    return reg;
}

/* ---- run ----------------------------------------------------------------- */

typedef struct job {
    int round, run;
} job;

static void run_task(pl_engine *e, void *user)
{
    const job *j = user;
    char id[32];
    snprintf(id, sizeof id, "soak-%d-%d", j->round, j->run);
    pl_outcome *o = NULL;
    int st = pl_run_continue(&o, e, id, NULL);
    if (st == PL_ENOTFOUND) {
        cJSON *p = NULL;
        st = pl_json_pack(&p, "{s:i, s:i}", "round", j->round, "run", j->run);
        pl_action a = {PL_ACTION_VERSION, "soak", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = id;
        if (!st)
            st = pl_run_start(&o, e, &a, &ro);
        cJSON_Delete(p);
    }
    if (st || o->status != PL_RUN_COMPLETED) {
        fprintf(stderr, "pl-soak: %s: %s\n", id,
                st ? pl_errmsg() : pl_run_status_name(o->status));
        g_failed = 1;
    }
    pl_outcome_free(o);
}

/* The status of run I of round R; PL_ENOTFOUND when it does not exist. */
static int status_of(pl_engine *e, int round, int run, pl_run_status *out)
{
    char id[32];
    snprintf(id, sizeof id, "soak-%d-%d", round, run);
    pl_run_info *info = NULL;
    int st = pl_run_get(&info, e, id);
    if (!st)
        *out = info->status;
    pl_run_info_free(info);
    return st;
}

static long peak_rss_kb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) ? -1 : ru.ru_maxrss;
}

static int cmd_run(const char *store, const char *effects, long gen,
                   long deadline)
{
    g_gen = gen;
    g_effects = open(effects, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (g_effects < 0) {
        fprintf(stderr, "pl-soak: %s: %s\n", effects, strerror(errno));
        return 1;
    }
    pl_registry *reg = registry();
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.durability = PL_DURABILITY_GROUP;
    pl_engine *e = NULL;
    pl_pool *pool = NULL;
    pl_pool_options po = PL_POOL_OPTIONS_INIT;
    po.threads = 4;
    po.tasks_per_thread = RUNS / 4;
    po.stack_size = (size_t)128 << 10;
    job *jobs = calloc(RUNS, sizeof *jobs);
    int st = reg && jobs ? pl_engine_open(&e, store, reg, &eo) : PL_ENOMEM;
    if (!st)
        st = pl_pool_new(&pool, e, &po);
    long rounds = 0, continued = 0;
    bool one_more = deadline < 0; /* -1: one new round, whenever */
    for (int round = 0; !st && !g_failed; round++) {
        pl_run_status s;
        int found = status_of(e, round, 0, &s);
        if (found == PL_ENOTFOUND) {
            if (one_more)
                one_more = false;
            else if (deadline <= 0 || time(NULL) >= deadline)
                break;
        }
        if (found && found != PL_ENOTFOUND) {
            st = found;
            break;
        }
        size_t queued = 0;
        for (int i = 0; i < RUNS && !st; i++) {
            int f = found == PL_ENOTFOUND ? PL_ENOTFOUND
                                          : status_of(e, round, i, &s);
            if (f == PL_OK && s == PL_RUN_COMPLETED)
                continue;
            if (f && f != PL_ENOTFOUND) {
                st = f;
                break;
            }
            continued += f == PL_OK;
            jobs[i] = (job){round, i};
            st = pl_pool_submit(pool, run_task, &jobs[i]);
            queued++;
        }
        if (!st)
            st = pl_pool_wait(pool);
        rounds += queued > 0;
    }
    if (st)
        fprintf(stderr, "pl-soak: %s\n", pl_errmsg());
    pl_pool_free(pool);
    pl_engine_close(e);
    pl_registry_free(reg);
    free(jobs);
    close(g_effects);
    printf("pl-soak: generation %ld: %ld rounds worked on, %ld runs "
           "continued, peak RSS %ld KiB\n",
           gen, rounds, continued, peak_rss_kb());
    return st || g_failed ? 1 : 0;
}

/* ---- check --------------------------------------------------------------- */

typedef struct tally {
    int rounds, gens;
    uint8_t *seen;   /* [round][run][call]: times made (saturating) */
    uint16_t *first; /* [round][run][call]: the generation that first did */
    int16_t *last;   /* [round][run][gen]: its last call in that gen */
    long lines, repeats;
} tally;

#define AT(t, r, i, c) ((((size_t)(r)*RUNS) + (size_t)(i)) * CALLS + (c))
#define GAT(t, r, i, g) ((((size_t)(r)*RUNS) + (size_t)(i)) * (t)->gens + (g))

static int count_runs(const pl_run_info *info, void *user)
{
    (void)info;
    (*(long *)user)++;
    return 0;
}

static int cmd_check(const char *store, const char *effects)
{
    FILE *f = fopen(effects, "r");
    if (!f) {
        fprintf(stderr, "pl-soak: %s: %s\n", effects, strerror(errno));
        return 1;
    }
    tally t = {0};
    int round, run, call;
    long gen;
    while (fscanf(f, "%d %d %d %ld", &round, &run, &call, &gen) == 4) {
        if (round < 0 || round > 100000 || run < 0 || run >= RUNS || call < 0 ||
            call >= CALLS || gen < 0 || gen > 30000) {
            fprintf(stderr, "pl-soak: a malformed effect line\n");
            fclose(f);
            return 1;
        }
        if (round + 1 > t.rounds)
            t.rounds = round + 1;
        if (gen + 1 > t.gens)
            t.gens = (int)gen + 1;
    }
    size_t n = (size_t)t.rounds * RUNS * CALLS;
    size_t gn = (size_t)t.rounds * RUNS * (size_t)t.gens;
    t.seen = calloc(n ? n : 1, 1);
    t.first = calloc(n ? n : 1, sizeof *t.first);
    t.last = malloc((gn ? gn : 1) * sizeof *t.last);
    int bad = !t.seen || !t.first || !t.last;
    if (!bad)
        memset(t.last, 0xff, (gn ? gn : 1) * sizeof *t.last);
    rewind(f);
    while (!bad && fscanf(f, "%d %d %d %ld", &round, &run, &call, &gen) == 4) {
        size_t at = AT(&t, round, run, call);
        t.lines++;
        if (t.seen[at]) {
            int was = t.first[at];
            t.repeats++;
            if (was >= gen || t.last[GAT(&t, round, run, was)] != call) {
                fprintf(stderr,
                        "pl-soak: soak-%d-%d call %d made again by "
                        "generation %ld, though generation %d finished it\n",
                        round, run, call, gen, was);
                bad = 1;
            }
        } else {
            t.first[at] = (uint16_t)gen;
        }
        if (t.seen[at] < 255)
            t.seen[at]++;
        t.last[GAT(&t, round, run, gen)] = (int16_t)call;
    }
    fclose(f);

    pl_registry *reg = registry();
    pl_engine *e = NULL;
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    if (!bad && (!reg || pl_engine_open(&e, store, reg, &eo))) {
        fprintf(stderr, "pl-soak: %s\n", pl_errmsg());
        bad = 1;
    }
    long runs = 0;
    if (!bad && pl_engine_runs(e, count_runs, &runs)) {
        fprintf(stderr, "pl-soak: listing runs: %s\n", pl_errmsg());
        bad = 1;
    }
    if (!bad && runs != (long)t.rounds * RUNS) {
        fprintf(stderr, "pl-soak: %ld runs in the store, %ld expected\n", runs,
                (long)t.rounds * RUNS);
        bad = 1;
    }
    for (int r = 0; !bad && r < t.rounds; r++) {
        for (int i = 0; !bad && i < RUNS; i++) {
            char id[32];
            snprintf(id, sizeof id, "soak-%d-%d", r, i);
            pl_run_info *info = NULL;
            int st = pl_run_get(&info, e, id);
            if (st || info->status != PL_RUN_COMPLETED) {
                fprintf(stderr, "pl-soak: %s is %s\n", id,
                        st ? pl_errmsg() : pl_run_status_name(info->status));
                bad = 1;
            } else if ((st = pl_run_verify(e, id))) {
                fprintf(stderr, "pl-soak: %s: %s\n", id, pl_errmsg());
                bad = 1;
            }
            pl_run_info_free(info);
            for (int c = 0; !bad && c < CALLS; c++)
                if (!t.seen[AT(&t, r, i, c)]) {
                    fprintf(stderr, "pl-soak: %s call %d never made\n", id, c);
                    bad = 1;
                }
        }
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    free(t.seen);
    free(t.first);
    free(t.last);
    if (!bad)
        printf("pl-soak: check: %ld runs completed and verified, %ld calls "
               "(%ld effects, %ld repeated: calls in flight at a kill), "
               "%d generations\n",
               runs, runs * CALLS, t.lines, t.repeats, t.gens);
    return bad;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 6 && strcmp(argv[1], "run") == 0)
        return cmd_run(argv[2], argv[3], strtol(argv[4], NULL, 10),
                       strtol(argv[5], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "check") == 0)
        return cmd_check(argv[2], argv[3]);
    fprintf(stderr, "usage: pl-soak run STORE EFFECTS GEN DEADLINE\n"
                    "       pl-soak check STORE EFFECTS\n");
    return 2;
}
