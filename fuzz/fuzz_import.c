/*
 * fuzz_import.c -- an export file (core/ops/import.c) as user-supplied
 * bytes: `ledger-replay STORE --import FILE` and pl_run_import().
 *
 * One LMDB store in a temporary folder serves the whole process (made
 * anew every RESET runs it takes); each input is imported under an id of
 * its own.  Whatever the bytes: a status and a message; only checking it
 * (no engine) gives the status importing it gives.  Refused: no run under
 * that id is left behind.  Taken: pl_run_verify() passes on the run, a
 * check-mode continue writes nothing, its export imports again under
 * another id, and that run exports as the same lines but for what names
 * the run and its hashes (id, number, hashes, the records that hold them).
 */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"

#define RESET 2000 /* runs taken before the store is made anew */

static pl_registry *g_reg;
static pl_engine *g_eng;
static char g_dir[64];
static unsigned long g_next, g_taken;

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void drop_store(void)
{
    pl_engine_close(g_eng);
    g_eng = NULL;
    if (g_dir[0])
        nftw(g_dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static void open_store(void)
{
    if (!g_reg) {
        CHECK(pl_registry_new(&g_reg) == PL_OK);
        atexit(drop_store);
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/pl-fuzz-import-XXXXXX");
    CHECK(mkdtemp(g_dir) != NULL);
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS;
    CHECK(pl_engine_open(&g_eng, g_dir, g_reg, &o) == PL_OK);
    g_taken = 0;
}

static int import_bytes(char **id, pl_engine *e, const void *data, size_t size,
                        const char *new_id)
{
    /* fmemopen() refuses a zero size: an empty file is /dev/null */
    FILE *in = size ? fmemopen((void *)data, size, "r")
                    : fopen("/dev/null", "r");
    CHECK(in != NULL);
    int st = pl_run_import(id, e, in, new_id);
    fclose(in);
    return st;
}

static char *export_of(const char *id, size_t *len)
{
    char *text = NULL;
    FILE *out = open_memstream(&text, len);
    CHECK(out != NULL);
    int st = pl_run_export(g_eng, id, out);
    CHECK(fclose(out) == 0);
    CHECK(st == PL_OK);
    return text;
}

/* An export's lines as JSON, what names the run and its hashes left out. */
static cJSON *lines_of(const char *text)
{
    static const char *const volatile_fields[] = {
        "run",    "run_number", "head",  "hash",      "prev_hash",
        "record", "info",       "state", "updated_us"};
    cJSON *all = cJSON_CreateArray();
    CHECK(all != NULL);
    for (const char *p = text, *nl; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        CHECK(nl != NULL); /* every line ends */
        cJSON *l = cJSON_ParseWithLength(p, (size_t)(nl - p));
        CHECK(cJSON_IsObject(l));
        for (size_t i = 0; i < sizeof volatile_fields / sizeof *volatile_fields;
             i++)
            cJSON_DeleteItemFromObjectCaseSensitive(l, volatile_fields[i]);
        cJSON_AddItemToArray(all, l);
    }
    return all;
}

static void taken(const char *id, size_t size)
{
    CHECK(pl_run_verify(g_eng, id) == PL_OK);
    pl_run_info *info = NULL;
    CHECK(pl_run_get(&info, g_eng, id) == PL_OK);
    bool ended = info->status == PL_RUN_COMPLETED ||
                 info->status == PL_RUN_FAILED ||
                 info->status == PL_RUN_CANCELLED;
    pl_run_info_free(info);
    if (ended) {
        /* a run that has ended continues to its outcome, writing nothing */
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.check = true;
        pl_outcome *o = NULL;
        int st = pl_run_continue(&o, g_eng, id, &ro);
        if (st == PL_OK)
            CHECK(o->calls_executed == 0 && o->steps_appended == 0);
        pl_outcome_free(o);
    }
    size_t n1 = 0, n2 = 0;
    char *e1 = export_of(id, &n1);
    char again[48], *id2 = NULL;
    snprintf(again, sizeof again, "%s-again", id);
    int st = import_bytes(&id2, g_eng, e1, n1, again);
    CHECK(st == PL_OK);
    CHECK(id2 && !strcmp(id2, again));
    CHECK(pl_run_verify(g_eng, id2) == PL_OK);
    char *e2 = export_of(id2, &n2);
    cJSON *a = lines_of(e1), *b = lines_of(e2);
    CHECK(same_json(a, b));
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(e1);
    free(e2);
    free(id2);
    (void)size;
    g_taken += 2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_eng || g_taken >= RESET) {
        drop_store();
        open_store();
    }
    char id[32];
    snprintf(id, sizeof id, "fz%lu", g_next++);
    /* checked only, with no store */
    char *cid = NULL;
    int cst = import_bytes(&cid, NULL, data, size, id);
    CHECK(cst == PL_OK || *pl_errmsg());
    CHECK((cst == PL_OK) == (cid != NULL));
    free(cid);
    char *got = NULL;
    int st = import_bytes(&got, g_eng, data, size, id);
    CHECK(st == PL_OK || st == PL_EJSON || st == PL_ECORRUPT ||
          st == PL_EVERSION || st == PL_ELIMIT || st == PL_EINVAL ||
          st == PL_ENOMEM || st == PL_EMAPFULL);
    CHECK(st == PL_OK || *pl_errmsg());
    CHECK(st == cst || st == PL_EMAPFULL || st == PL_ENOMEM ||
          cst == PL_ENOMEM);
    if (st == PL_OK) {
        CHECK(got && !strcmp(got, id));
        taken(id, size);
    } else {
        CHECK(got == NULL);
        pl_run_info *info = NULL;
        CHECK(pl_run_get(&info, g_eng, id) == PL_ENOTFOUND);
        if (st == PL_EMAPFULL)
            g_taken = RESET;
    }
    free(got);
    return 0;
}
