/*
 * order-demo -- run the order workflow durably; crash it on purpose; watch
 * the next run finish it without repeating what was done.
 *
 *   order-demo [--store PATH] [--effects FILE] [--order ID]
 *              [--plugin LIB.so] [--crash-after N]
 *              [--durability sync|group|process] [--quiet]
 *
 * The workflow's policies come from a plugin (order-plugin.so, next to this
 * program, unless --plugin names another), loaded as ledger-replay loads
 * it: so the tools can finish what the demo started.  The plugin's tools
 * write their effects where ORDER_EFFECTS says (this sets it from
 * --effects): the run does not record it, since the effects file is the
 * outside world (a provider) and not the order.  A tool that finishes a
 * run this started with --effects FILE is run with ORDER_EFFECTS=FILE, or
 * its tools talk to another "provider", which charges again a charge in
 * flight at the crash.
 * The run for an order is named "order-ID".  If it exists already, this
 * continues it: every finished call is served from its ledger.  With
 * --crash-after N the process kills itself with SIGKILL at the N-th step
 * boundary (a step appended or a commit made).
 *
 * Exit status: 0 the order completed with its result; 1 it failed or ended
 * in an error result, or the store, the plugin or the effects file cannot
 * be opened; 2 bad usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "help.h"
#include "order/order.h"

typedef struct demo {
    long crash_after;
    long boundary;
    int quiet;
} demo;

/* pl_run_walk() visitor: count the steps stored. */
static int count_step(const pl_step *step, void *user)
{
    (void)step;
    ++*(unsigned long long *)user;
    return 0;
}

static void on_event(const pl_event *ev, void *user)
{
    demo *d = user;
    if (ev->kind == PL_EVENT_STEP_APPENDED || ev->kind == PL_EVENT_COMMIT) {
        d->boundary++;
        if (d->crash_after > 0 && d->boundary == d->crash_after) {
            printf("  *** SIGKILL at boundary %ld (%s%s%s) ***\n", d->boundary,
                   pl_event_kind_name(ev->kind), ev->path ? " in " : "",
                   ev->path ? ev->path : "");
            fflush(stdout);
            raise(SIGKILL);
        }
    }
    if (d->quiet || !ev->path || strcmp(ev->path, "0") != 0)
        return;
    switch (ev->kind) {
    case PL_EVENT_CALL_SERVED:
        printf("  %-14s served from the ledger\n", ev->policy);
        break;
    case PL_EVENT_CALL_COMPLETED:
        printf("  %-14s executed (%.2f ms, durable)\n", ev->policy,
               (double)ev->elapsed_ns / 1e6);
        break;
    case PL_EVENT_CALL_FAILED:
        printf("  %-14s failed: %s\n", ev->policy,
               ev->detail ? ev->detail : pl_strerror(ev->status));
        break;
    default: break;
    }
    fflush(stdout);
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: order-demo [--store PATH] [--effects FILE] [--order ID]\n"
        "                  [--plugin LIB.so] [--crash-after N]\n"
        "                  [--durability MODE] [--quiet]\n"
        "\n"
        "Runs an order (reserve stock, charge card, ship) as a durable "
        "run.\nIf the order's run exists, continues it from its ledger.\n"
        "\n"
        "  --store PATH       LMDB store file (default order-demo.db)\n"
        "  --effects FILE     where the tools' side effects are appended\n"
        "                     (default order-demo.effects); the plugin takes\n"
        "                     it from ORDER_EFFECTS, which the run does not\n"
        "                     record: another process that finishes the run\n"
        "                     (ledger-replay, ledger-web, a worker) needs\n"
        "                     ORDER_EFFECTS=FILE too, else its tools write to\n"
        "                     order-demo.effects, a provider that never saw\n"
        "                     the charge made before the crash\n"
        "  --order ID         order id (default A-1001)\n"
        "  --plugin LIB.so    the workflow's plugin (default: order-plugin.so\n"
        "                     next to this program)\n"
        "  --crash-after N    SIGKILL this process at step boundary N (from 1)\n"
        "  --durability MODE  sync (default), group or process\n"
        "  --quiet            print only the outcome\n"
        "\n"
        "Exit status: 0 completed, 1 failed (or ended in an error result, or "
        "the\nstore, the plugin or the effects file cannot be opened), 2 bad "
        "usage.\n");
}

/* A usage error: one line, and where the rest is said. */
static int bad_usage(const char *what, const char *arg)
{
    fprintf(stderr, "order-demo: %s '%s' (see --help)\n", what, arg);
    return 2;
}

static int parse_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* order-plugin.so in this program's directory. */
static int default_plugin(char *out, size_t cap)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    int w = snprintf(out, cap, "%s/order-plugin.so", self);
    return w < 0 || (size_t)w >= cap ? -1 : 0;
}

static void print_effects(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    printf("side effects so far (%s):\n", path);
    char line[1024];
    while (fgets(line, sizeof line, f))
        printf("  %s", line);
    fclose(f);
}

int main(int argc, char **argv)
{
    const char *store = "order-demo.db", *effects = "order-demo.effects";
    const char *order_id = "A-1001", *plugin = NULL;
    char plugin_buf[4200];
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    demo d = {0, 0, 0};
    unsigned given = 0; /* the flags met, a bit each */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return help_written("order-demo");
        } else if (!strcmp(a, "--quiet")) {
            d.quiet = 1;
            continue;
        }
        static const char *const valued[] = {"--store",       "--effects",
                                             "--order",       "--plugin",
                                             "--crash-after", "--durability"};
        size_t k = 0, n = sizeof valued / sizeof valued[0];
        while (k < n && strcmp(a, valued[k]))
            k++;
        if (k == n)
            return bad_usage(a[0] == '-' ? "unknown option"
                                         : "unexpected argument",
                             a);
        if (given & 1u << k) { /* not the last one silently taken */
            fprintf(stderr, "order-demo: %s is given twice\n", a);
            return 2;
        }
        given |= 1u << k;
        if (!v) {
            fprintf(stderr, "order-demo: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--store"))
            store = v;
        else if (!strcmp(a, "--effects"))
            effects = v;
        else if (!strcmp(a, "--order"))
            order_id = v;
        else if (!strcmp(a, "--plugin"))
            plugin = v;
        else if (!strcmp(a, "--crash-after")) {
            if (parse_long(v, &d.crash_after) || d.crash_after < 1) {
                fprintf(stderr,
                        "order-demo: --crash-after needs a number, "
                        "not '%s': a step boundary from 1\n",
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--durability")) {
            if (pl_durability_parse(&eo.durability, v)) {
                fprintf(stderr, "order-demo: %s\n", pl_errmsg());
                return 2;
            }
        }
    }
    /* the order id is the tail of the run's id, so it takes the run ids'
     * characters (include/policyledger.h, LIMITS) */
    bool id_ok = *order_id != '\0';
    for (const char *p = order_id; *p; p++)
        id_ok &= (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                 (*p >= '0' && *p <= '9') || strchr("._:@~-", *p);
    if (!id_ok) {
        fprintf(stderr, "order-demo: bad order id: it must be 1 or more of "
                        "[A-Za-z0-9._:@~-]\n");
        return 2;
    }
    char run_id[PL_MAX_RUN_ID + 1];
    if (snprintf(run_id, sizeof run_id, "order-%s", order_id) >=
        (int)sizeof run_id) {
        fprintf(stderr, "order-demo: order id is too long\n");
        return 2;
    }

    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    pl_outcome *o = NULL;
    cJSON *payload = NULL;
    int rc = 1, st;
    if (!plugin) {
        if (default_plugin(plugin_buf, sizeof plugin_buf)) {
            fprintf(stderr, "order-demo: cannot find order-plugin.so; name it "
                            "with --plugin\n");
            return 2;
        }
        plugin = plugin_buf;
    }
    /* the plugin reads where its tools write their effects from here: a
     * file that cannot be written is said now, not found by a tool as an
     * unreachable warehouse */
    FILE *ef = fopen(effects, "a");
    if (!ef) {
        fprintf(stderr, "order-demo: --effects '%s': %s\n", effects,
                strerror(errno));
        return 1;
    }
    fclose(ef);
    if (setenv("ORDER_EFFECTS", effects, 1)) {
        fprintf(stderr, "order-demo: cannot set ORDER_EFFECTS\n");
        return 2;
    }
    if ((st = pl_registry_new(&reg)) || (st = pl_plugin_load(reg, plugin)))
        goto fail;
    eo.on_event = on_event;
    eo.event_user = &d;
    if ((st = pl_engine_open(&e, store, reg, &eo)))
        goto fail;

    /* One start both begins the run and finishes a crashed one: with
     * if_exists CONTINUE, a run id already in the store is continued, every
     * recorded result served from its ledger.  pl_run_get() is only here to
     * say which it is. */
    pl_run_info *info = NULL;
    st = pl_run_get(&info, e, run_id);
    if (st == PL_ENOTFOUND) {
        printf("run %s: starting (durability %s)\n", run_id,
               pl_durability_name(eo.durability));
    } else if (!st) {
        /* a running run's record counts its steps only at its owner's
         * heartbeats, which a crash cuts short: count what is stored */
        unsigned long long n = info->steps;
        if (info->status == PL_RUN_RUNNING) {
            n = 0;
            st = pl_run_walk(e, run_id, count_step, &n);
        }
        if (!st)
            printf("run %s: found with status %s, %llu durable steps%s; "
                   "continuing\n",
                   run_id, pl_run_status_name(info->status), n,
                   info->status == PL_RUN_RUNNING && !info->owner_alive
                       ? " (its process died)"
                       : "");
        pl_run_info_free(info);
    }
    if (st == PL_OK || st == PL_ENOTFOUND) {
        payload = order_sample(order_id);
        pl_action root = PL_ACTION_INIT;
        root.policy = "order";
        root.payload = payload;
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = run_id;
        ro.if_exists = PL_IF_EXISTS_CONTINUE;
        st = pl_run_start(&o, e, &root, &ro);
    }
    if (st)
        goto fail;

    char *result = o->status == PL_RUN_COMPLETED
                       ? cJSON_PrintUnformatted(pl_outcome_result(o))
                       : NULL;
    printf("run %s: %s%s%s\n", run_id, pl_run_status_name(o->status),
           result ? " " : "", result ? result : "");
    if (o->status == PL_RUN_FAILED)
        printf("  reason: %s\n", o->reason);
    printf("  calls executed %llu, served from the ledger %llu; steps "
           "appended %llu, replayed %llu\n",
           (unsigned long long)o->calls_executed,
           (unsigned long long)o->calls_served,
           (unsigned long long)o->steps_appended,
           (unsigned long long)o->steps_replayed);
    free(result);
    if (!d.quiet)
        print_effects(effects);
    /* an error as its result is no order done */
    size_t n_steps = o->steps ? pl_steps_count(o->steps) : 0;
    rc = o->status == PL_RUN_COMPLETED &&
                 !(n_steps &&
                   pl_step_is_error(pl_steps_at(o->steps, n_steps - 1)))
             ? 0
             : 1;
    goto done;
fail:
    fprintf(stderr, "order-demo: %s (%s)\n", pl_errmsg(), pl_status_name(st));
done:
    pl_outcome_free(o);
    cJSON_Delete(payload);
    pl_engine_close(e);
    pl_registry_free(reg);
    return rc;
}
