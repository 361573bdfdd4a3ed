/*
 * dump_verify.c -- ledger-dump --verify: every run's hash chains and
 * records checked, each fault printed.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <policyledger_llm.h>

#include "dump.h"

/* ---- verify ------------------------------------------------------------------- */

typedef struct verify_ctx {
    pl_engine *e;
    const opts *o;
    size_t runs, faults;
    cJSON *faults_json;
    char **ids;
    size_t n_ids, cap_ids;
    bool oom;
} verify_ctx;

static int collect_id(const pl_run_info *ri, void *user)
{
    verify_ctx *v = user;
    if (v->n_ids == v->cap_ids) {
        size_t cap = v->cap_ids ? v->cap_ids * 2 : 64;
        char **ids = realloc(v->ids, cap * sizeof *ids);
        if (!ids) {
            v->oom = true;
            return 1;
        }
        v->ids = ids;
        v->cap_ids = cap;
    }
    if (!(v->ids[v->n_ids] = cli_strdup(ri->id))) {
        v->oom = true;
        return 1;
    }
    v->n_ids++;
    return 0;
}

static void fault(verify_ctx *v, const char *run, const char *msg)
{
    v->faults++;
    if (v->o->format == FMT_TEXT) {
        printf("FAULT run %s: %s\n", run ? run : "(store)", msg);
        return;
    }
    cJSON *f = cJSON_CreateObject();
    if (!f) {
        v->oom = true;
        return;
    }
    if (run)
        cJSON_AddStringToObject(f, "run", run);
    else
        cJSON_AddNullToObject(f, "run");
    if (v->o->format == FMT_JSONL)
        cJSON_AddFalseToObject(f, "ok");
    cJSON_AddStringToObject(f, "message", msg);
    if (v->o->format == FMT_JSONL) {
        cli_json_line(stdout, f);
        cJSON_Delete(f);
    } else {
        cJSON_AddItemToArray(v->faults_json, f);
    }
}

static void verify_one(verify_ctx *v, const char *id)
{
    v->runs++;
    int st = pl_run_verify(v->e, id);
    if (st == PL_OK) {
        if (v->o->format == FMT_TEXT)
            printf("ok    run %s\n", id);
        if (v->o->format == FMT_JSONL) { /* a line a run, as the text */
            cJSON *ok = cJSON_CreateObject();
            if (!ok || !cJSON_AddStringToObject(ok, "run", id) ||
                !cJSON_AddTrueToObject(ok, "ok") || !cli_json_line(stdout, ok))
                v->oom = true;
            cJSON_Delete(ok);
        }
        return;
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: %s", pl_strerror(st), pl_errmsg());
    fault(v, id, msg);
}

int cmd_verify(pl_engine *e, const opts *o)
{
    verify_ctx v = {0};
    v.e = e;
    v.o = o;
    if (o->format == FMT_JSON && !(v.faults_json = cJSON_CreateArray())) {
        cli_error("out of memory");
        return CLI_EXIT_STORE;
    }
    if (o->run) {
        pl_run_info *ri = NULL;
        int st = pl_run_get(&ri, e, o->run);
        pl_run_info_free(ri);
        if (st == PL_ENOTFOUND && cli_say_deleted(e, o->run)) {
            cJSON_Delete(v.faults_json);
            return CLI_EXIT_STORE;
        }
        if (st == PL_ENOTFOUND || st == PL_EINVAL) {
            cli_error("no run %s in the store", QUOTE(o->run));
            cJSON_Delete(v.faults_json);
            return CLI_EXIT_STORE;
        }
        verify_one(&v, o->run); /* a broken record is a fault too */
    } else {
        int st = pl_engine_runs(e, collect_id, &v);
        if (v.oom) {
            cli_error("out of memory");
        } else if (st) {
            char msg[1024];
            snprintf(msg, sizeof msg, "the run list: %s: %s", pl_strerror(st),
                     pl_errmsg());
            fault(&v, NULL, msg);
        }
        for (size_t i = 0; i < v.n_ids; i++)
            verify_one(&v, v.ids[i]);
    }
    if (o->format == FMT_TEXT) {
        printf("%zu run(s) checked, %zu fault(s)\n", v.runs, v.faults);
    } else if (o->format == FMT_JSON) {
        cJSON *doc = cJSON_CreateObject();
        if (doc) {
            cJSON_AddNumberToObject(doc, "runs_checked", (double)v.runs);
            cJSON_AddNumberToObject(doc, "fault_count", (double)v.faults);
            cJSON_AddItemToObject(doc, "faults", v.faults_json);
            v.faults_json = NULL;
            cli_json_document(stdout, doc);
        }
        cJSON_Delete(doc);
    }
    cJSON_Delete(v.faults_json);
    for (size_t i = 0; i < v.n_ids; i++)
        free(v.ids[i]);
    free(v.ids);
    if (v.faults)
        return CLI_EXIT_FAULT;
    return v.oom ? CLI_EXIT_STORE : CLI_EXIT_OK;
}
