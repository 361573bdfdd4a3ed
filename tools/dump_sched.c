/*
 * dump_sched.c -- ledger-dump --schedules: the store's schedules and when
 * each fires next.
 */
#include <stdlib.h>
#include <string.h>

#include "dump.h"

static const char *str(const cJSON *o, const char *k)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, k));
    return s ? s : "";
}

static int64_t ms(const cJSON *o, const char *k)
{
    return (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, k));
}

/* "2026-11-28 02:00:00 (in 2 d 3 h)", "... (5 min 3 s ago)", or "-" for no
 * time. */
static void when(char *out, size_t n, int64_t at_ms, int64_t now_ms)
{
    if (at_ms <= 0) {
        snprintf(out, n, "-");
        return;
    }
    char t[64], span[40];
    if (!cli_ms_human(t, sizeof t, at_ms)) { /* no date it is not */
        snprintf(out, n, "%s", t);
        return;
    }
    int64_t d = at_ms - now_ms;
    cli_span_text(span, sizeof span, d < 0 ? -d : d);
    snprintf(out, n, d < 0 ? "%s (%s ago)" : "%s (in %s)", t, span);
}

/* What a tick's run is submitted with: "prio -5, key exports/1, deadline
 * 30 min", or "-" for nothing. */
static void run_with(char *out, size_t n, const cJSON *s)
{
    int64_t prio = ms(s, "priority"), in = ms(s, "deadline_in_ms");
    const char *key = str(s, "concurrency_key");
    size_t at = 0;
    out[0] = '\0';
    if (prio)
        at += (size_t)snprintf(out, n, "prio %lld", (long long)prio);
    if (*key && at < n)
        at += (size_t)snprintf(out + at, n - at, "%skey %s/%lld",
                               at ? ", " : "", key,
                               (long long)ms(s, "concurrency_limit"));
    if (in && at < n) {
        char span[40];
        cli_span_text(span, sizeof span, in);
        snprintf(out + at, n - at, "%sdeadline %s", at ? ", " : "", span);
    }
    if (!out[0])
        snprintf(out, n, "-");
}

int cmd_schedules(pl_engine *e, const opts *o)
{
    int64_t now_ms = cli_now_us() / 1000;
    cJSON *list = NULL;
    int st = pl_schedule_list(&list, e, now_ms);
    if (st) {
        cli_error("cannot list the schedules: %s", pl_errmsg());
        return CLI_EXIT_STORE;
    }
    cJSON *s;
    cJSON_ArrayForEach(s, list) cli_json_schedule(s);
    if (o->format == FMT_JSON) {
        cJSON *doc = cJSON_CreateObject();
        if (doc && cJSON_AddItemToObject(doc, "schedules", list)) {
            list = NULL;
            cli_json_document(stdout, doc);
        }
        cJSON_Delete(doc);
    } else if (o->format == FMT_JSONL) {
        cJSON_ArrayForEach(s, list) cli_json_line(stdout, s);
    } else {
        printf("%-24s  %-20s  %-18s  %-16s  %-12s  %-24s  %s\n", "SCHEDULE",
               "CRON", "ZONE", "POLICY", "RULES", "RUNS WITH", "NEXT (UTC)");
        cJSON_ArrayForEach(s, list)
        {
            char next[96], rules[48], with[256];
            run_with(with, sizeof with, s);
            int64_t due = ms(s, "due_ms");
            /* ticks waiting to fire (no worker ran) show first */
            bool late = due > 0 && due <= now_ms;
            when(next, sizeof next, late ? due : ms(s, "next_ms"), now_ms);
            const char *cu = str(s, "catch_up");
            if (!strcmp(cu, "all"))
                snprintf(rules, sizeof rules, "%s,all:%d", str(s, "overlap"),
                         (int)ms(s, "catch_up_max"));
            else
                snprintf(rules, sizeof rules, "%s,%s", str(s, "overlap"), cu);
            /* what the store holds, its control characters escaped */
            printf("%-24s  %-20s  %-18s  %-16s  %-12s  %-24s  %s%s\n",
                   cli_text(str(s, "name")), cli_text(str(s, "cron")),
                   cli_text(str(s, "zone")), cli_text(str(s, "policy")),
                   cli_text(rules), cli_text(with), next,
                   late ? ", due: no worker has fired it" : "");
        }
    }
    cJSON_Delete(list);
    return CLI_EXIT_OK;
}
