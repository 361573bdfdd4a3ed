/*
 * bench_w1.c -- W1, sequential calls in each durability mode, next to
 * its floors (taking turns at the disk with them in the synced modes).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <libpq-fe.h>
#include <lmdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <policyledger.h>
#include <policyledger_llm.h>
#include <sys/socket.h>

#include "bench.h"
#include "pg_store.h" /* pl__pg_counts_get(): round trips to the server */

/* ---- W1: sequential ------------------------------------------------------------- */

/* The floors' side of the turns: floor and rawcall stores, fresh. */
static void floors_in_turns(const void *varg, void *vres)
{
    const w1_arg *a = varg;
    turns_res *r = vres;
    signal(SIGPIPE, SIG_IGN);
    close(a->turns->to_floors[1]);
    close(a->turns->to_run[0]);
    MDB_dbi d1, dc;
    MDB_env *e1 = raw_open("floor.mdb", a->mode, &d1);
    MDB_env *ec = raw_open("rawcall.mdb", a->mode, &dc);
    int n;
    for (int turn = 0;
         read(a->turns->to_floors[0], &n, sizeof n) == (ssize_t)sizeof n;
         turn++) {
        for (int j = 0; j < 2; j++) {
            bool call = (turn + j) % 2;
            double t0 = now_s();
            raw_commits(call ? ec : e1, call ? dc : d1, 0, r->n, n, call, true);
            *(call ? &r->rawcall_s : &r->floor_s) += now_s() - t0;
        }
        r->n += n;
        char done = 1;
        if (write(a->turns->to_run[1], &done, 1) != 1)
            break;
    }
    raw_close(e1, "floor.mdb");
    raw_close(ec, "rawcall.mdb");
}

void w1_child(const void *varg, void *vres)
{
    const w1_arg *a = varg;
    w1_res *r = vres;
    char path[1100];
    path_in(path, sizeof path, "w1.db");
    remove_store(path);
    pl_registry *reg = make_registry(false);
    pl_engine *e = open_engine(path, reg, a->mode, NULL);
    g_lat = calloc((size_t)a->n, sizeof *g_lat);
    g_nlat = 0;
    if (a->turns) {
        signal(SIGPIPE, SIG_IGN); /* a gone partner is an error, said */
        close(a->turns->to_floors[0]);
        close(a->turns->to_run[1]);
        g_turn.out = a->turns->to_floors[1];
        g_turn.in = a->turns->to_run[0];
    }
    pl__pg_counts w0, w1;
    pl__pg_counts_get(&w0);
    double t0 = now_s();
    if (start_run(e, a->n, "w1"))
        die("W1 run");
    double dt = now_s() - t0 - g_turn.paused;
    pl__pg_counts_get(&w1);
    r->wait_per_call_s = (double)(w1.wait_ns - w0.wait_ns) / 1e9 / a->n;
    if (a->turns) { /* the floors' process ends at end of file */
        close(g_turn.out);
        close(g_turn.in);
        g_turn.out = g_turn.in = -1;
    }
    r->calls_per_s = a->n / dt;
    r->per_call_s = dt / a->n;
    r->p50_s = percentile(g_lat, g_nlat, 0.50);
    r->p95_s = percentile(g_lat, g_nlat, 0.95);
    r->peak_rss_kb = status_kb("VmHWM");
    r->anon_rss_kb = status_kb("RssAnon");
    free(g_lat);
    g_lat = NULL;
    pl_engine_close(e);
    remove_store(path);

    /* commits per call, counted on a small separate run */
    e = open_engine(path, reg, a->mode, count_commits);
    g_commits = 0;
    int n = a->n < 200 ? a->n : 200;
    if (start_run(e, n, "w1-commits"))
        die("W1 commit count");
    r->commits_per_call = (double)(g_commits - 1) / n; /* minus the end */
    if (g_pg_uri) {
        pl__pg_counts c0, c1, c2;
        pl__pg_counts_get(&c0);
        if (start_run(e, n / 2, "w1-rt-half"))
            die("W1 round trips");
        pl__pg_counts_get(&c1);
        if (start_run(e, n, "w1-rt-whole"))
            die("W1 round trips");
        pl__pg_counts_get(&c2);
        double k = n - n / 2;
        r->round_trips_per_call = ((double)(c2.round_trips - c1.round_trips) -
                                   (double)(c1.round_trips - c0.round_trips)) /
                                  k;
        /* the statements run: less the commits' shapes prepared */
        r->statements_per_call = ((double)(c2.statements - c2.prepares -
                                           (c1.statements - c1.prepares)) -
                                  (double)(c1.statements - c1.prepares -
                                           (c0.statements - c0.prepares))) /
                                 k;
    }
    pl_engine_close(e);
    pl_registry_free(reg);
    remove_store(path);
}

/* One repetition of W1 in turns: the run and the floors, side by side. */
static int w1_turns_rep(const w1_arg *a, w1_res *run, turns_res *floors)
{
    w1_turns t;
    if (pipe(t.to_floors))
        return -1;
    if (pipe(t.to_run)) {
        close(t.to_floors[0]);
        close(t.to_floors[1]);
        return -1;
    }
    w1_arg ta = *a;
    ta.turns = &t;
    int from_floors, from_run;
    pid_t fpid = child_start(floors_in_turns, &ta, floors, sizeof *floors,
                             &from_floors);
    pid_t rpid = fpid < 0
                     ? -1
                     : child_start(w1_child, &ta, run, sizeof *run, &from_run);
    /* only the two children hold the pipes now: either one's end is the
     * other's end of file */
    close(t.to_floors[0]);
    close(t.to_floors[1]);
    close(t.to_run[0]);
    close(t.to_run[1]);
    int rc = rpid < 0 ? -1 : child_finish(rpid, from_run, run, sizeof *run);
    if (fpid >= 0 &&
        child_finish(fpid, from_floors, floors, sizeof *floors) == 0 &&
        floors->n == a->n)
        return rc;
    return -1;
}

/*
 * One repetition of W1: the run, and per record the floor's and rawcall's
 * time.  Sync and group take turns; process runs the three back to back,
 * each first in turn (k).
 */
static int w1_rep(const w1_arg *a, int k, w1_res *run, double *floor_s,
                  double *rawcall_s)
{
    if (a->mode != PL_DURABILITY_PROCESS) {
        turns_res tr;
        if (w1_turns_rep(a, run, &tr))
            return -1;
        *floor_s = tr.floor_s / a->n;
        *rawcall_s = tr.rawcall_s / a->n;
        return 0;
    }
    floor_arg fa = {a->mode, a->n, 1, false}; /* the same tree size */
    floor_arg fac = {a->mode, a->n, 1, true};
    floor_res fr, frc;
    for (int j = 0; j < 3; j++) {
        int rc;
        switch ((k + j) % 3) {
        case 0: rc = in_child(w1_child, a, run, sizeof *run); break;
        case 1: rc = in_child(floor_puts, &fa, &fr, sizeof fr); break;
        default: rc = in_child(floor_puts, &fac, &frc, sizeof frc);
        }
        if (rc)
            return -1;
    }
    *floor_s = fr.per_record_s;
    *rawcall_s = frc.per_record_s;
    return 0;
}

/* W1's floor holding a call's records, per mode and size. */
typedef struct w1_rawcall {
    double per_call_s;
    double of_floor;  /* its time / the floor's */
    double engine_of; /* the engine's time / its */
} w1_rawcall;

/* W1 in every mode and size, next to its floors; returns the failures. */
int report_w1(bool quick)
{
    int failures = 0;
    w1_rawcall rawcall[3][2];
    bool have_rawcall[3][2] = {{false}};
    int w1_sizes_full[] = {1000, 10000}, w1_sizes_quick[] = {200};
    int *w1_sizes = quick ? w1_sizes_quick : w1_sizes_full;
    int w1_n = quick ? 1 : 2;
    cJSON *jw1 = cJSON_AddArrayToObject(g_json, "w1_sequential");
    say("W1 sequential: one run, N calls of a tool returning ~100 B; floors "
        "measured in turns\n  with the run every %d calls (sync, group) or "
        "back to back (process)\n",
        TURN);
    say("  %-8s %6s %11s %9s %9s %9s %10s %9s %8s %8s\n", "mode", "N",
        "calls/s", "us/call", "p50 us", "p95 us", "floor us", "ratio",
        "commits", "peak MB");
    for (size_t m = 0; m < 3; m++) {
        for (int s = 0; s < w1_n; s++) {
            /* the medians of the repetitions are reported, so one burst of
             * disk noise moves none, and a ratio is the median of the
             * repetitions' own ratios, so the host's speed changing
             * between repetitions does not move it either */
            w1_arg a = {modes[m], w1_sizes[s], NULL};
            w1_res runs[REPS_MAX];
            double eng[REPS_MAX], flo[REPS_MAX], pair[REPS_MAX];
            double floc[REPS_MAX], of_floor[REPS_MAX], engine_of[REPS_MAX];
            bool short_runs = modes[m] == PL_DURABILITY_PROCESS || a.n <= 1000;
            int reps = quick ? 1 : g_reps * (short_runs ? SHORT_REPS : 1);
            int ok = 0;
            drift d;
            drift_begin(&d, modes[m]);
            for (int k = 0; k < reps; k++) {
                if (w1_rep(&a, k, &runs[ok], &flo[ok], &floc[ok]))
                    continue;
                eng[ok] = runs[ok].per_call_s;
                pair[ok] = eng[ok] / flo[ok];
                of_floor[ok] = floc[ok] / flo[ok];
                engine_of[ok] = eng[ok] / floc[ok];
                ok++;
            }
            drift_end(&d, NULL);
            if (!ok) {
                say("  %-8s %6d failed\n", pl_durability_name(modes[m]), a.n);
                failures++;
                continue;
            }
            double floor_s = median(flo, ok), eng_s = median(eng, ok);
            w1_res r = runs[0];
            for (int k = 0; k < ok; k++) /* the run with the median time */
                if (runs[k].per_call_s == eng_s)
                    r = runs[k];
            floor_res fr = {floor_s, 1 / floor_s};
            double ratio = median(pair, ok);
            w1_rawcall rcall = {median(floc, ok), median(of_floor, ok),
                                median(engine_of, ok)};
            rawcall[m][s] = rcall;
            have_rawcall[m][s] = true;
            say("  %-8s %6d %11.0f %9.1f %9.1f %9.1f %10.1f %8.2fx %8.2f "
                "%8.1f  %s\n",
                pl_durability_name(modes[m]), a.n, r.calls_per_s,
                r.per_call_s * 1e6, r.p50_s * 1e6, r.p95_s * 1e6,
                fr.per_record_s * 1e6, ratio, r.commits_per_call,
                (double)r.peak_rss_kb / 1024, d.note);
            char what[96];
            if (modes[m] != PL_DURABILITY_GROUP) {
                snprintf(what, sizeof what,
                         "W1 %s, N=%d: time per call / "
                         "floor",
                         pl_durability_name(modes[m]), a.n);
                add_goal_noted(what, ratio, "x", true,
                               modes[m] == PL_DURABILITY_SYNC ? 1.1 : 2.0,
                               d.note);
            }
            if (modes[m] == PL_DURABILITY_SYNC && s == w1_n - 1)
                add_goal("W1 sync: LMDB commits per call", r.commits_per_call,
                         "", true, 1.0);
            if (a.n == 10000) {
                snprintf(what, sizeof what, "W1 %s, N=10000: peak RSS",
                         pl_durability_name(modes[m]));
                add_goal(what, (double)r.peak_rss_kb / 1024, "MB", true, 10.0);
            }
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "durability",
                                    pl_durability_name(modes[m]));
            jnum(o, "n", a.n);
            jnum(o, "calls_per_s", r.calls_per_s);
            jnum(o, "us_per_call", r.per_call_s * 1e6);
            jnum(o, "p50_us", r.p50_s * 1e6);
            jnum(o, "p95_us", r.p95_s * 1e6);
            jnum(o, "peak_rss_kb", (double)r.peak_rss_kb);
            jnum(o, "anon_rss_kb", (double)r.anon_rss_kb);
            jnum(o, "commits_per_call", r.commits_per_call);
            jnum(o, "floor_us_per_record", fr.per_record_s * 1e6);
            cJSON_AddStringToObject(o, "floor_measured",
                                    modes[m] == PL_DURABILITY_PROCESS
                                        ? "back to back"
                                        : "in turns");
            jnum(o, "ratio_to_floor", ratio);
            drift_json(&d, o);
            jnum(o, "rawcall_us_per_call", rcall.per_call_s * 1e6);
            jnum(o, "rawcall_ratio_to_floor", rcall.of_floor);
            jnum(o, "ratio_to_rawcall", rcall.engine_of);
            cJSON_AddItemToArray(jw1, o);
        }
    }
    say("\n  rawcall: the floor committing what a call commits, two records "
        "of 80 and 133 B;\n  the engine's time over it is what the "
        "engine adds to storing a call, less what\n  its zeroed tail "
        "saves the synced modes (the floors, plain LMDB, lengthen the "
        "file):\n");
    say("  %-8s %6s %11s %14s %15s\n", "mode", "N", "rawcall us",
        "rawcall/floor", "engine/rawcall");
    for (size_t m = 0; m < 3; m++)
        for (int s = 0; s < w1_n; s++)
            if (have_rawcall[m][s])
                say("  %-8s %6d %11.1f %13.2fx %14.2fx\n",
                    pl_durability_name(modes[m]), w1_sizes[s],
                    rawcall[m][s].per_call_s * 1e6, rawcall[m][s].of_floor,
                    rawcall[m][s].engine_of);
    return failures;
}
