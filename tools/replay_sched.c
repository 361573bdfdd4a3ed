/*
 * replay_sched.c -- ledger-replay --schedule-put and --schedule-delete:
 * schedules managed from a shell.  Every input is checked before the store
 * is opened (the expression and the zone with pl_cron_next()), so a
 * refused command creates and writes nothing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

/* "skip", "latest", "all:N" (N from 1 to 1000). */
static bool parse_catch_up(pl_schedule *s, const char *v)
{
    if (!strcmp(v, "skip"))
        s->catch_up = PL_CATCH_UP_SKIP;
    else if (!strcmp(v, "latest"))
        s->catch_up = PL_CATCH_UP_LATEST;
    else if (!strncmp(v, "all:", 4) && v[4] >= '1' && v[4] <= '9') {
        char *end;
        errno = 0;
        unsigned long n = strtoul(v + 4, &end, 10);
        if (errno || *end || n > 1000)
            return false;
        s->catch_up = PL_CATCH_UP_ALL;
        s->catch_up_max = (unsigned)n;
    } else
        return false;
    return true;
}

static bool name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 100)
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'))
            return false;
    return true;
}

int prepare_schedule(tool *t)
{
    const options *o = &t->opt;
    char q[CLI_QUOTE_MAX];
    const char *name = o->mode == MODE_SCHED_PUT ? o->sched_put
                                                 : o->sched_delete;
    if (!name_ok(name)) {
        cli_error("bad schedule name %s: 1 to 100 bytes of [A-Za-z0-9._-]",
                  cli_quote(q, sizeof q, name));
        return EXIT_USAGE;
    }
    if (o->mode == MODE_SCHED_DELETE)
        return 0;
    pl_schedule *s = &t->schedule;
    *s = (pl_schedule)PL_SCHEDULE_INIT;
    s->name = name;
    s->cron = o->cron;
    s->zone = o->zone;
    s->policy = o->policy;
    int64_t next;
    int st = pl_cron_next(&next, o->cron, o->zone, cli_now_us() / 1000);
    if (st) {
        cli_error("schedule %s: %s", QUOTE(name), pl_errmsg());
        return EXIT_USAGE;
    }
    if (!*o->policy || strlen(o->policy) > PL_MAX_NAME) {
        cli_error("--policy needs a policy name of 1 to %d bytes", PL_MAX_NAME);
        return EXIT_USAGE;
    }
    if (o->overlap) {
        if (!strcmp(o->overlap, "skip"))
            s->overlap = PL_OVERLAP_SKIP;
        else if (!strcmp(o->overlap, "allow"))
            s->overlap = PL_OVERLAP_ALLOW;
        else {
            cli_error("bad --overlap %s: give skip or allow",
                      cli_quote(q, sizeof q, o->overlap));
            return EXIT_USAGE;
        }
    }
    if (o->catch_up && !parse_catch_up(s, o->catch_up)) {
        cli_error("bad --catch-up %s: give skip, latest or all:N (N from 1 "
                  "to 1000)",
                  cli_quote(q, sizeof q, o->catch_up));
        return EXIT_USAGE;
    }
    if (o->priority)
        s->priority = o->priority - PL_PRIORITY_MAX - 1;
    if (o->key && (!*o->key || strlen(o->key) > PL_MAX_FLOW_KEY)) {
        cli_error("bad --key %s: a concurrency key is 1 to %d bytes",
                  cli_quote(q, sizeof q, o->key), PL_MAX_FLOW_KEY);
        return EXIT_USAGE;
    }
    s->concurrency_key = o->key;
    s->concurrency_limit = o->key_limit;
    if (o->deadline &&
        !cli_parse_duration_ms(&s->deadline_in_ms, o->deadline)) {
        cli_error("bad --deadline %s: give a duration (30m, 2h, 45s)",
                  cli_quote(q, sizeof q, o->deadline));
        return EXIT_USAGE;
    }
    t->payload = cli_parse_object(o->payload, "--payload");
    if (!t->payload)
        return EXIT_USAGE;
    char *text = pl_json_print(t->payload, false);
    size_t len = text ? strlen(text) : 0;
    free(text);
    if (len > 65536) {
        cli_error("--payload is more than 64 KiB of JSON");
        return EXIT_USAGE;
    }
    s->payload = t->payload;
    return 0;
}

void mode_schedule(tool *t)
{
    const options *o = &t->opt;
    bool put = o->mode == MODE_SCHED_PUT;
    const char *name = put ? o->sched_put : o->sched_delete;
    int st = put ? pl_schedule_put(t->engine, &t->schedule)
                 : pl_schedule_delete(t->engine, name);
    if (st) {
        cli_error("cannot %s schedule %s: %s (%s)", put ? "put" : "delete",
                  QUOTE(name), pl_errmsg(), pl_status_name(st));
        worst(t, st == PL_ENOTFOUND ? EXIT_OPEN
                 : st == PL_EINVAL  ? EXIT_USAGE
                                    : write_code(st));
        return;
    }
    if (!put) {
        if (!o->json)
            printf("deleted schedule %s\n", cli_text(name));
        return;
    }
    /* its next tick, as the store now holds it */
    int64_t next = 0;
    (void)pl_cron_next(&next, o->cron, o->zone, cli_now_us() / 1000);
    char when[40];
    cli_time_iso(when, sizeof when, next * 1000, false);
    if (o->json) {
        /* the schedule as ledger-dump --schedules --format json shows it,
         * read back from the store */
        cJSON *list = NULL;
        cJSON *one = NULL;
        if (!pl_schedule_list(&list, t->engine, cli_now_us() / 1000))
            cJSON_ArrayForEach(one, list)
            {
                const char *n = cJSON_GetStringValue(
                    cJSON_GetObjectItem(one, "name"));
                if (n && !strcmp(n, name))
                    break;
            }
        t->sched_json = one ? cJSON_DetachItemViaPointer(list, one) : NULL;
        cJSON_Delete(list);
        if (!t->sched_json) {
            cli_error("schedule %s: put, but it cannot be read back: %s",
                      QUOTE(name), pl_errmsg());
            worst(t, EXIT_OPEN);
            return;
        }
        cli_json_schedule(t->sched_json);
    } else {
        printf("schedule %s: next tick %s\n", cli_text(name), when);
    }
}
