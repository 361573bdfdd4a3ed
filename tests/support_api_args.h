/*
 * support_api_args.h -- the tables of test_api_args*.c: a row is one call
 * of a public function with a bad argument and what its header promises
 * for it (the status, a message naming the argument, the out-parameter
 * left NULL or 0); the fixture is an engine on a store holding one
 * completed run, and bad names, ids and payloads.
 */
#ifndef PL_TEST_SUPPORT_API_ARGS_H
#define PL_TEST_SUPPORT_API_ARGS_H

#include "support.h"

#include <policyledger_llm.h>
#include <policyledger_mcp.h>
#include <stdint.h>

/* What a row's call is given: an engine on a store holding one completed
 * run ("done"), a registry, bad names and payloads, and an out-parameter
 * of every type, set to garbage before each call. */
typedef struct fx {
    pl_engine *e;
    pl_ctx *ctx; /* in a policy: its context */
    pl_registry *reg;
    const cJSON *obj;                /* {} */
    cJSON *arr;                      /* [] : not an object */
    char long_id[PL_MAX_RUN_ID + 2]; /* one byte too long */
    char long_name[PL_MAX_NAME + 2]; /* one byte too long */
    char long_reason[4098];          /* a cancel's reason, too long */
    union {                          /* the out-parameter, whatever its type */
        void *p;
        pl_engine *eng;
        pl_outcome *outcome;
        pl_run_info *info;
        pl_steps *steps;
        cJSON *json;
        char *str;
        pl_registry *reg;
        pl_schema *schema;
        pl_sandbox *sb;
        pl_tools *tools;
        pl_trace *trace;
        pl_pool *pool;
        pl_schema_cache *cache;
        pl_mcp *mcp;
        pl_otel *otel;
        pl_step *step;
        const pl_steps *view;
        uint64_t u64;
        int64_t i64;
        size_t size;
        int fd;
        pl_durability dur;
        pl_step_type type;
        uint8_t hash[PL_HASH_LEN];
    } out;
} fx;

/* What a failing call leaves in its out-parameter. */
enum out_rule {
    OUT_ANY,  /* no out-parameter, or none promised */
    OUT_ZERO, /* NULL, or 0 */
};

typedef struct row {
    const char *call; /* the call, as written in the table */
    int want;         /* the status its header gives */
    const char *word; /* what pl_errmsg() must name: the argument */
    enum out_rule out;
    int (*fn)(fx *f);
} row;

/* A table is an X-macro of rows X(id, status, word, out rule, call); the
 * call reads the fixture through `f`. */
#define ROW_FN(id, want, word, out, call)                                      \
    static int row_##id(fx *f)                                                 \
    {                                                                          \
        (void)f;                                                               \
        return (call);                                                         \
    }
#define ROW_ENTRY(id, want, word, out, call) {#call, want, word, out, row_##id},

/* Run each row with @p f, checking what its header promises, and with an
 * engine open, that the store's change mark did not move. */
void run_rows(fx *f, const row *rows, size_t n);

#define RUN_TABLE(f, TABLE)                                                    \
    do {                                                                       \
        static const row rows_[] = {TABLE(ROW_ENTRY)};                         \
        run_rows(f, rows_, sizeof rows_ / sizeof rows_[0]);                    \
    } while (0)

/* The store fx_open() made (a t_store_path()). */
extern const char *g_store;
/* The bad names and payloads alone (no engine). */
void fx_names(fx *f);
/* fx_names(), the test registry, and an engine on a new store holding one
 * completed run, "done". */
void fx_open(fx *f);
void fx_close(fx *f);
/* Run @p rows on a store fx_open() made (no row may move its change
 * mark), then reopen it: it holds what fx_open() left, one run and no
 * schedule. */
void run_on_a_store(const row *rows, size_t n);

/* A root action of @p policy with @p payload. */
#define ACT(policy, payload)                                                   \
    (&(pl_action){PL_ACTION_VERSION, (policy), (payload), NULL, 0, NULL})
/* Run options giving run id @p id. */
#define RUN_ID(id)                                                             \
    (&(pl_run_options){PL_RUN_OPTIONS_VERSION, (id), false, PL_IF_EXISTS_FAIL, \
                       0, 0, 0, NULL, 0})
#define RUN_V(v)                                                               \
    (&(pl_run_options){(v), NULL, false, PL_IF_EXISTS_FAIL, 0, 0, 0, NULL, 0})
#define BAD_UTF8 "r\xff\xfe" /* not UTF-8 */
#define CTRL_ID "run\x01id"  /* a control character, no NUL */
/* A versioned struct of @p type at version @p v, its other fields 0. */
#define V(type, v) (&(type){.version = (v)})

#endif
