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
    size_t unread; /* runs not checked: the store not read (PL_ESTORE),
                      or out of memory */
    cJSON *faults_json;
    char **ids;
    char **why; /* per id: NULL, or the listing's failure at its record */
    size_t n_ids, cap_ids;
    const char *stop_at;   /* the listing from the end: ids past this one */
    char list_fault[1024]; /* where the listing from the start failed */
    bool oom;
} verify_ctx;

/* Add run @p id to the list, with the listing's failure at its record
 * (@p why, or NULL). */
static int add_id(verify_ctx *v, const char *id, const char *why)
{
    if (v->n_ids == v->cap_ids) {
        size_t cap = v->cap_ids ? v->cap_ids * 2 : 64;
        char **ids = realloc(v->ids, cap * sizeof *ids);
        char **whys = ids ? realloc(v->why, cap * sizeof *whys) : NULL;
        if (ids)
            v->ids = ids;
        if (!whys) {
            v->oom = true;
            return 1;
        }
        v->why = whys;
        v->cap_ids = cap;
    }
    v->ids[v->n_ids] = cli_strdup(id);
    v->why[v->n_ids] = why ? cli_strdup(why) : NULL;
    if (!v->ids[v->n_ids] || (why && !v->why[v->n_ids])) {
        free(v->ids[v->n_ids]);
        v->oom = true;
        return 1;
    }
    v->n_ids++;
    return 0;
}

static int collect_id(const pl_run_info *ri, void *user)
{
    verify_ctx *v = user;
    if (v->stop_at && strcmp(ri->id, v->stop_at) <= 0)
        return 1; /* listed from the end: down to where the first stopped */
    return add_id(v, ri->id, NULL);
}

/* A run whose record cannot be read: its fault is its own, with the
 * listing's reason. */
static int collect_damaged(const char *id, int st, const char *why, void *user)
{
    verify_ctx *v = user;
    if (v->stop_at && strcmp(id, v->stop_at) <= 0)
        return 1;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: %s", pl_strerror(st), why);
    return add_id(v, id, msg);
}

static void fault(verify_ctx *v, const char *run, const char *msg)
{
    v->faults++;
    if (v->o->format == FMT_TEXT) {
        /* the message may quote what the store holds: escaped */
        printf("FAULT run %s: %s\n", run ? cli_text(run) : "(store)",
               cli_text(msg));
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

/* A check that could not be made: the store not read (a server gone,
 * an I/O error) or out of memory.  That says nothing of the store's
 * bytes: no fault, but the check is not whole (exit 2). */
static bool not_read(int st) { return st == PL_ESTORE || st == PL_ENOMEM; }

/* Check run @p id; false when it is gone: deleted since it was listed
 * (a prune, a retention rule in another process), which is neither a run
 * checked nor a fault. */
static bool verify_one(verify_ctx *v, const char *id)
{
    int st = pl_run_verify(v->e, id);
    if (st == PL_ENOTFOUND)
        return false;
    if (not_read(st)) {
        v->unread++;
        cli_error("cannot check run %s: %s: %s", QUOTE(id), pl_strerror(st),
                  pl_errmsg());
        return true;
    }
    v->runs++;
    if (st == PL_OK) {
        if (v->o->format == FMT_TEXT)
            printf("ok    run %s\n", cli_text(id));
        if (v->o->format == FMT_JSONL) { /* a line a run, as the text */
            cJSON *ok = cJSON_CreateObject();
            if (!ok || !cJSON_AddStringToObject(ok, "run", id) ||
                !cJSON_AddTrueToObject(ok, "ok") || !cli_json_line(stdout, ok))
                v->oom = true;
            cJSON_Delete(ok);
        }
        return true;
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: %s", pl_strerror(st), pl_errmsg());
    fault(v, id, msg);
    return true;
}

/*
 * Every run's id, to verify each: a listing that fails at a run record it
 * cannot read names that run (its fault is its own, with the listing's
 * reason) and goes on past it; one that fails where it can name no run
 * (a damaged key) is a fault of the store, and the runs past the damage
 * are listed from the end, down to it.  A damaged record hides no other
 * run from the check.
 */
static void list_all(verify_ctx *v)
{
    pl_runs_options ro = PL_RUNS_OPTIONS_INIT;
    ro.damaged = collect_damaged;
    int st = pl_engine_runs_from(v->e, &ro, collect_id, v);
    if (v->oom) {
        cli_error("out of memory");
        return;
    }
    if (!st)
        return;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: %s", pl_strerror(st), pl_errmsg());
    if (not_read(st)) { /* no damage found: the list is not whole */
        v->unread++;
        cli_error("cannot list the runs: %s", msg);
        return;
    }
    char whole[1100];
    snprintf(whole, sizeof whole, "the run list: %s", msg);
    fault(v, NULL, whole);
    snprintf(v->list_fault, sizeof v->list_fault, "%s", msg);
    /* from the end, down to the last run listed */
    size_t from = v->n_ids;
    char last[PL_MAX_RUN_ID + 1];
    snprintf(last, sizeof last, "%s", from ? v->ids[from - 1] : "");
    ro.reverse = true;
    v->stop_at = last;
    st = pl_engine_runs_from(v->e, &ro, collect_id, v);
    v->stop_at = NULL;
    if (v->oom) {
        cli_error("out of memory");
        return;
    }
    snprintf(msg, sizeof msg, "%s: %s", pl_strerror(st), pl_errmsg());
    /* 1: down to the last run listed; the same damage met from the other
     * side is said once */
    if (st && st != 1 && not_read(st)) {
        v->unread++;
        cli_error("cannot list the runs from their end: %s", msg);
    } else if (st && st != 1 && strcmp(msg, v->list_fault)) {
        snprintf(whole, sizeof whole, "the run list, from its end: %s", msg);
        fault(v, NULL, whole);
    }
    for (size_t i = from, j = v->n_ids; j > i + 1; i++, j--) {
        char *t = v->ids[i], *w = v->why[i]; /* in the listing's order */
        v->ids[i] = v->ids[j - 1];
        v->why[i] = v->why[j - 1];
        v->ids[j - 1] = t;
        v->why[j - 1] = w;
    }
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
        /* a broken record is a fault too; a run deleted since it was
         * read is no run */
        if (!st || (st != PL_ENOTFOUND && st != PL_EINVAL))
            st = verify_one(&v, o->run) ? PL_OK : PL_ENOTFOUND;
        if (st == PL_ENOTFOUND && cli_say_deleted(e, o->run)) {
            cJSON_Delete(v.faults_json);
            return CLI_EXIT_STORE;
        }
        if (st == PL_ENOTFOUND || st == PL_EINVAL) {
            cli_error("no run %s in the store", QUOTE(o->run));
            cJSON_Delete(v.faults_json);
            return CLI_EXIT_STORE;
        }
    } else {
        list_all(&v);
        for (size_t i = 0; i < v.n_ids && !v.oom; i++) {
            if (v.why[i]) {
                v.runs++;
                fault(&v, v.ids[i], v.why[i]);
            } else {
                verify_one(&v, v.ids[i]);
            }
        }
    }
    if (o->format == FMT_TEXT) {
        printf("%zu run(s) checked, %zu fault(s)", v.runs, v.faults);
        if (v.unread)
            printf(", %zu could not be read: the check is not whole", v.unread);
        printf("\n");
    } else if (o->format == FMT_JSON) {
        cJSON *doc = cJSON_CreateObject();
        if (doc) {
            cJSON_AddNumberToObject(doc, "runs_checked", (double)v.runs);
            cJSON_AddNumberToObject(doc, "fault_count", (double)v.faults);
            if (v.unread) /* the document of a whole check as it was */
                cJSON_AddNumberToObject(doc, "not_read", (double)v.unread);
            cJSON_AddItemToObject(doc, "faults", v.faults_json);
            v.faults_json = NULL;
            cli_json_document(stdout, doc);
        }
        cJSON_Delete(doc);
    }
    cJSON_Delete(v.faults_json);
    for (size_t i = 0; i < v.n_ids; i++) {
        free(v.ids[i]);
        free(v.why[i]);
    }
    free(v.ids);
    free(v.why);
    /* damage found is the answer, whatever could not be read besides */
    if (v.faults)
        return CLI_EXIT_FAULT;
    return v.oom || v.unread ? CLI_EXIT_STORE : CLI_EXIT_OK;
}
