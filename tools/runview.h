/*
 * runview.h -- a run as the tools show it in JSON (runview.c): its record,
 * its steps marked, its model tokens.  The objects ledger-dump --format
 * json prints, and ledger-web serves.
 */
#ifndef PL_RUNVIEW_H
#define PL_RUNVIEW_H

#include <policyledger_llm.h>

#include "cli.h"

/* A run's status as a person reads it ("running (owner gone: crashed)"). */
const char *status_text(const pl_run_info *ri);
/* Running, and its owner is gone. */
bool crashed(const pl_run_info *ri);
/* Ended for good (completed, failed, cancelled, superseded, continued):
 * what pl_run_delete() takes. */
bool run_ended(const pl_run_info *ri);
/* A run's record as JSON; NULL on OOM. */
cJSON *run_json(const pl_run_info *ri);
/* Its "steps" set to @p steps, counted in the store (a running run's
 * record counts them as of its owner's last heartbeat).  false: out of
 * memory, @p o unchanged. */
bool run_json_set_steps(cJSON *o, uint64_t steps);
/* To a run's summary (ledger-replay --json's, ledger-web's answer to an
 * action), what its outcome says of how it stands: completed, `result`;
 * suspended, `suspended_path`, `resume_token` and `prompt`; waiting,
 * `waiting_path`, `wake_ms` (null: no timer) and `wait_event` (null: no
 * event); continued, `successor`; else `error` and `reason` (null: none).
 * False when out of memory. */
bool outcome_fields(cJSON *j, const pl_outcome *o);

/* A step as read, kept for marking (in-doubt calls need what follows). */
typedef struct srow {
    char *id;
    char *path;
    uint32_t seq;
    pl_step_type type;
    char *actor;
    cJSON *payload;
    int64_t time_us;
    char *code;
    bool has_hash;
    uint8_t hash[PL_HASH_LEN];
    uint8_t prev[PL_HASH_LEN];
    bool is_error;
} srow;

/* Every step of a run, in tree order. */
typedef struct rows {
    srow *v;
    size_t n, cap;
    bool oom;
} rows;

void rows_free(rows *r);
/* Add step @p s to @p r (copied; its payload a JSON null unless
 * @p payload).  False on OOM (r->oom set). */
bool rows_add(rows *r, const pl_step *s, bool payload);
/* Read every step of run @p run into @p r (emptied first).  A pl_status. */
int read_rows(pl_engine *e, const char *run, rows *r);
/* The same from step @p from on, in tree order (pl_run_walk_from(); NULL:
 * the whole run). */
int read_rows_from(pl_engine *e, const char *run, const char *from, rows *r);
/* Does @p path lie at or below @p top? */
bool under(const char *path, const char *top);

/* The marks of row @p i: in-doubt calls, waiting calls, error results. */
typedef enum { MARK_NONE, MARK_IN_DOUBT, MARK_WAITING } call_mark;
call_mark call_mark_of(const rows *r, size_t i, const pl_run_info *ri);
/* The mark of call @p seq of ledger @p path when no step of that ledger
 * answers it: waiting, in doubt, or none (in flight in a live run). */
call_mark call_mark_unanswered(const char *path, uint32_t seq,
                               const pl_run_info *ri);
/* "in_doubt", "waiting", "error", "suspended" or NULL. */
const char *mark_name(const rows *r, size_t i, const pl_run_info *ri);
/* The same for step @p w whose call mark (for a call) is @p m. */
const char *mark_text(call_mark m, const srow *w, const pl_run_info *ri);
/* Row @p w of run @p run as JSON, with its mark if any; NULL on OOM. */
cJSON *row_json(const char *run, const srow *w, const char *mark);

/* The export's lines marked as the run's rows are (pl_run_export_each()
 * hands them in the rows' order): add "mark" to @p line if its step has
 * one.  @p next is where the last line left off (start at 0).  False on
 * OOM. */
bool mark_export_line(cJSON *line, const rows *r, const pl_run_info *ri,
                      size_t *next);

/* What a check (pl_run_continue() with check) that returned @p st says of
 * a run recorded as @p recorded (failed with @p recorded_error): "ok",
 * "diverged", "unsupported_version" (a code version the loaded code does
 * not support, PL_ECODEVERSION), "needs_newer_code" (newer code recorded
 * it, PL_ENEWERCODE: not a failure, a worker running that code goes on) or
 * "error", and in *note why it is ok, or why a completed run whose replay
 * went on past its record (PL_ECHECK) is "diverged" (or NULL). */
const char *check_verdict(int st, pl_run_status recorded, int recorded_error,
                          const char **note);

/* The token totals of the run's model calls (none: false). */
bool run_tokens(pl_llm_tokens *t, pl_engine *e, const char *id);
/* Add "tokens" to @p run when it made model calls.  False on OOM. */
bool add_tokens(cJSON *run, pl_engine *e, const char *id);

#endif /* PL_RUNVIEW_H */
