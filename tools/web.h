/*
 * web.h -- what the files of ledger-web share.  web_main.c parses the
 * command line, opens the store and starts the server; web_http.c speaks
 * HTTP (libmicrohttpd): a request read, its answer sent with the headers
 * every answer carries; web_route.c answers a request, whatever carried it
 * (the server, or fuzz/fuzz_web.c): authentication, CSRF, bounds, the
 * page's files, routing; web_api.c the JSON API's reads (a run, its timeline,
 * its export); web_steps.c a run's steps a page at a time, and the calls
 * they make with what answered them; web_list.c the run list's filters and
 * pages; web_live.c what runs in the background (counts per status, the
 * change poller and its Server-Sent Events) and the overview;
 * web_overview.c the overview; web_actions.c the POST actions;
 * web_guard.c what a hostile client meets (origins, parameters, slow
 * requests).
 */
#ifndef PL_WEB_H
#define PL_WEB_H

#include <pthread.h>
#include <sys/socket.h>

#include "runview.h"

#define WEB_BODY_MAX ((size_t)1 << 20) /* largest request body */
#define WEB_PAGE_MAX 500               /* most runs in one page */
#define WEB_PAGE_DEFAULT 50
#define WEB_SCAN_MAX 20000 /* most run records one request reads */
#define WEB_SSE_MAX 16     /* Server-Sent Events streams at once */
#define WEB_CONN_MAX 64    /* connections at once */
#define WEB_CONN_PER_IP 32 /* of them from one address */
#define WEB_TIMEOUT_S 30   /* an idle connection is closed after */
#define WEB_REQUEST_S 10   /* to send a request, from connect or last answer */
#define WEB_POLL_MS 500    /* how often the store's change mark is read */
#define WEB_EVENTS 256     /* events kept for the streams */
#define WEB_WATCH_MAX 1000 /* unfinished runs watched for changes */
#define WEB_OLDEST_MAX 10  /* oldest suspended runs kept by the counts */
#define WEB_EXPORT_MAX (64 << 20)  /* largest export served */
#define WEB_EXPORTS 4              /* exports made or downloaded at once */
#define WEB_EXPORTS_PER_IP 2       /* of them for one address */
#define WEB_RETRY_S 5              /* Retry-After of a 503 */
#define WEB_STALL_S 30             /* an answer whose client takes none of it */
#define WEB_STALL_MAX 3600         /* --stall-timeout at most */
#define WEB_ARGS_MAX 100           /* query parameters a request may have */
#define WEB_TOKEN_MIN 16           /* bytes a token must have */
#define WEB_TOKEN_MAX 512          /* and may have: its cookie whole */
#define WEB_TARGET_MAX (64 << 10)  /* a request line's target (path, query) */
#define WEB_HEAD_MAX (64 << 10)    /* its line and header lines, bytes */
#define WEB_HEAD_LINES 100         /* header lines */
#define WEB_STEP_PAGE_DEFAULT 200  /* steps in a page of a run's steps */
#define WEB_STEP_PAGE_MAX 1000     /* most steps in one */
#define WEB_PAGE_BYTES (1 << 20)   /* payload bytes a page stops after */
#define WEB_PAYLOAD_CAP (64 << 10) /* a longer payload is cut in a page */
#define WEB_PAYLOAD_PREVIEW 2048   /* to its first bytes */
#define WEB_STEP_ID_MAX 400        /* longest step id taken */
#define WEB_RUN_SCAN_MAX 200000    /* steps a run's summary reads */
#define WEB_TIMELINE_STEPS 5000    /* steps the timeline reads */
/* A search (q) reads each run's steps' payloads, at most: */
#define WEB_SEARCH_RUN_STEPS 2000           /* steps of a run */
#define WEB_SEARCH_RUN_BYTES (16 << 20)     /* and their payloads' bytes */
#define WEB_SEARCH_STEPS 20000              /* steps of a request */
#define WEB_SEARCH_BYTES ((size_t)64 << 20) /* and their bytes */

/* Counted statuses: pl_run_status values, and crashed (running, its owner
 * gone) apart from running. */
#define WEB_STATUS_N 16
#define WEB_CRASHED 0

typedef struct web_oldest {
    char id[PL_MAX_RUN_ID + 1];
    int64_t created_us, updated_us;
    char policy[PL_MAX_NAME + 1];
} web_oldest;

/* An unfinished run the poller watches, as last seen. */
typedef struct web_watch {
    char *id;
    int status;
    bool crashed;
    uint64_t steps;
    int64_t updated_us;
} web_watch;

/* A run announced "new" lately: a count, which meets every run, announces
 * the runs made since it last looked that the poller has not (web_live.c). */
typedef struct web_announced {
    char *id;
    int64_t created_us;
} web_announced;

typedef struct web_event {
    uint64_t seq;
    char *text; /* "event: ...\ndata: ...\n\n" */
} web_event;

typedef struct web {
    const char *store;
    pl_engine *engine;
    pl_registry *reg;
    bool read_only;
    char *token; /* NULL: none asked (loopback only) */
    char csrf[65];
    char url[160];
    bool loopback;
    unsigned stall_s;    /* --stall-timeout */
    const char *tmp_dir; /* where exports are written: $TMPDIR, /tmp */

    /* web_live.c, under mu */
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a new event, or stopping */
    pthread_cond_t wake;    /* the counts thread's */
    bool stopping;
    uint64_t counts[WEB_STATUS_N], counts_total;
    uint64_t counts_damaged; /* run records that cannot be read */
    bool counts_complete;
    int64_t counts_as_of_us, counts_scan_us;
    bool counts_dirty;
    web_oldest oldest[WEB_OLDEST_MAX];
    size_t n_oldest;
    char newest[PL_MAX_RUN_ID + 1];
    web_watch *watch;
    size_t n_watch;
    web_announced *announced; /* by id; made since announce_since_us */
    size_t n_announced, cap_announced;
    int64_t announce_since_us;
    web_event events[WEB_EVENTS];
    uint64_t event_seq;
    uint64_t mark;
    unsigned sse;
    uint64_t sse_kicks; /* web_sse_kick()s: the streams look at their
                         * connections */
    pthread_t poller, counter;
    bool mu_ready, threads;
} web;

/* ---- a request and its answer (web_route.c) ---- */

/* Where a request's values come from: libmicrohttpd's connection
 * (web_http.c), or bytes decoded without a socket (fuzz/fuzz_web.c). */
typedef enum web_kind { WEB_HEADER, WEB_COOKIE, WEB_ARG } web_kind;
typedef struct web_src {
    /* The value named @p name of @p kind, or NULL. */
    const char *(*get)(void *conn, web_kind kind, const char *name);
    /* Each query parameter's name, in order, to @p fn. */
    void (*each_arg)(void *conn, void (*fn)(void *cls, const char *name),
                     void *cls);
} web_src;

typedef struct web_req {
    void *conn; /* @p src's: a struct MHD_Connection */
    const web_src *src;
    const struct sockaddr *client; /* its address; NULL unknown */
    const char *method, *url;      /* url: the path, %XX decoded */
    char *body;
    size_t len;
    bool too_big;
    size_t args;       /* query parameters, when over WEB_ARGS_MAX (dropped) */
    size_t target_len; /* the request line's target, as sent */
    size_t head_bytes; /* the request line and header lines, as sent */
    size_t head_lines; /* header lines */
} web_req;

/* An export's place, held while it is made and downloaded (web_guard.c). */
typedef struct web_slot web_slot;

#define WEB_REPLY_HEADERS 2
/* An answer, for the transport to send (web_http.c) or to read. */
typedef struct web_reply {
    int status;
    const char *type; /* Content-Type; NULL: none */
    char *body;       /* @p len bytes; freed by web_reply_free() if own */
    size_t len;
    bool own;
    bool api;    /* an answer of the API: not stored by caches */
    bool bare;   /* no header but its type: a request too large to hold
                  * leaves little room for an answer's (web_http.c) */
    bool events; /* a Server-Sent Events stream: holds a place (web_live.c) */
    int fd;      /* an export's file, @p len bytes, to download; -1 none */
    web_slot *slot; /* the place the export holds */
    size_t n_headers;
    struct {
        const char *name;
        char value[640];
    } headers[WEB_REPLY_HEADERS];
} web_reply;

/* The answer to @p r: who may ask, the bounds, then the routes.  What both
 * the server and the fuzzer call. */
void web_handle(web *w, web_req *r, web_reply *out);
/* Release what @p out holds (its body, file, places). */
void web_reply_free(web *w, web_reply *out);

/* A request's query parameter, header, or NULL. */
const char *web_arg(const web_req *r, const char *name);
const char *web_header(const web_req *r, const char *name);

/* ---- web_http.c ---- */

/* Start and stop the server.  On failure says why and returns false. */
bool web_http_start(web *w, const char *host, unsigned port);
void web_http_stop(web *w);

/* ---- replies (web_route.c) ---- */

/* {"error": code, "message": ...} in *out; returns @p status. */
int web_fail(cJSON **out, int status, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* JSON text @p text with every '<', '>' and '&' as a \u escape: they occur
 * in JSON only inside strings, where the escape means the same, and so no
 * answer or event holds markup, whatever reads it.  Takes @p text; NULL
 * on OOM. */
char *web_json_inert(char *text);
/* The HTTP status of a failing engine call: 404 for PL_ENOTFOUND; 409 for
 * PL_EBUSY, PL_ESTATE, PL_EEXIST, PL_ESUSPENDED, PL_ECANCELLED,
 * PL_ENEWERCODE; 400 for
 * PL_EINVAL, PL_ETOKEN, PL_EJSON, PL_ELIMIT (the request's fault); 500
 * else. */
int web_http_status(int st);
/* A failing engine call as a reply, its status web_http_status()'s. */
int web_fail_status(cJSON **out, int st, const char *what);

/* ---- web_api.c: GET, each returns the HTTP status and sets *out ---- */

int api_session(web *w, const web_req *r, cJSON **out);
int api_run(web *w, const char *id, cJSON **out);
int api_timeline(web *w, const char *id, cJSON **out);
/* The run's export as JSON lines, in an unnamed temporary file in
 * w->tmp_dir: *fd at its start (the caller closes it), *len bytes. */
int api_export(web *w, const char *id, int *fd, size_t *len, cJSON **out);

/* ---- web_steps.c ---- */

/* GET /api/runs/ID/steps (a page from a cursor) and /api/runs/ID/step. */
int api_steps(web *w, const char *id, const web_req *r, cJSON **out);
int api_step(web *w, const char *id, const web_req *r, cJSON **out);
/* Read run @p id's record: 200, else a 404 or an error in *out. */
int web_get_run(web *w, const char *id, pl_run_info **ri, cJSON **out);
/* Add "tokens" to @p o: run @p id's model tokens, {input, output,
 * model_calls} (zeros for a run that made no model call), or null when
 * they cannot be read.  False when out of memory. */
bool web_add_tokens(cJSON *o, web *w, const char *id);
/* The first page of run @p ri's steps into @p doc (steps, next, limit,
 * payload_cap).  The HTTP status; on failure a reply in *out. */
int web_first_page(web *w, const pl_run_info *ri, cJSON *doc, cJSON **out);

/* The invocation path of step @p s ("0.3" of step "0.3:1") in @p out. */
void web_step_path(const pl_step *s, char *out, size_t n);

/* The calls of a stream of steps awaiting an answer. */
typedef struct web_pending {
    char *path; /* the caller's ledger */
    void *call;
} web_pending;
typedef struct web_tracker {
    web_pending *v;
    size_t n, cap;
} web_tracker;
/* A call's end: @p answered by the step just fed, or never. */
typedef void (*web_end_fn)(void *call, bool answered, void *user);
/* Feed the next step of a run in tree order (its ledger @p path and type;
 * @p call a handle for it if it is a call), or NULL for the end: the calls
 * it answers or leaves unanswered end.  False on OOM. */
bool web_track(web_tracker *t, const char *path, pl_step_type type, void *call,
               web_end_fn end, void *user);
void web_track_free(web_tracker *t);

/* A run's unanswered calls marked in_doubt or waiting, from one walk of
 * at most @p max_steps steps (0: all); its error results counted. */
typedef struct web_marks {
    char **id;
    const char **mark;
    size_t n, cap;
    size_t steps, errors;
    bool truncated, oom;
} web_marks;
int web_run_marks(web *w, const pl_run_info *ri, size_t max_steps,
                  web_marks *m);
void web_marks_free(web_marks *m);
/* The mark of call @p step_id, or NULL. */
const char *web_marks_find(const web_marks *m, const char *step_id);

/* ---- web_list.c ---- */

int api_runs(web *w, const web_req *r, cJSON **out);
int api_inbox(web *w, const web_req *r, cJSON **out);

/* status=damaged: the runs whose record cannot be read alone. */
#define WEB_DAMAGED (-2)

/* The list's filters, from a request's arguments. */
typedef struct web_filter {
    int status; /* 0: any; a pl_run_status; -1: crashed; WEB_DAMAGED:
                 * none but the damaged runs, which every status shows */
    const char *policy, *prefix, *q;
    int64_t since_us, until_us; /* 0: unbounded */
    bool asc;
    size_t limit;
    const char *cursor;
} web_filter;

/* What a request's search (q) read of the runs' steps. */
typedef struct web_search {
    size_t runs;       /* runs whose steps it read */
    size_t steps;      /* steps read */
    size_t bytes;      /* their payloads' bytes, as JSON */
    size_t cut;        /* runs read up to the bounds of a run only */
    size_t unreadable; /* runs whose steps could not be read */
    bool oom;
} web_search;

/* Is @p what an action of a run (POST /api/runs/ID/WHAT), or with @p batch
 * a batch action (POST /api/batch/WHAT)? */
bool web_is_action(const char *what, bool batch);
/* Parse @p r's filter arguments, its limit 1..@p limit_max; on a bad one,
 * a 400 in *out. */
int web_filter_parse(web_filter *f, const web_req *r, size_t limit_max,
                     cJSON **out);
/* Does run @p ri pass @p f (but for the cursor and the limit)?  1 yes, 0
 * no; WEB_SEARCH_SPENT when deciding needs more of the request's search
 * bounds than @p s has left (stop before this run: the next request goes
 * on from it).  On OOM, 0 and s->oom. */
#define WEB_SEARCH_SPENT (-1)
int web_filter_match(web *w, const web_filter *f, const pl_run_info *ri,
                     web_search *s);
/* What @p s read, as member "search" of @p into (nothing without q). */
bool web_search_json(const web_filter *f, const web_search *s, cJSON *into);
/* Where a listing with @p f starts (pl_runs_options.after): its cursor,
 * else just outside its prefix's range; "" for the start.  @p n at least
 * PL_MAX_RUN_ID + 3. */
void web_filter_start(const web_filter *f, char *out, size_t n);
/* Is run @p id past the range of @p f's prefix, in @p f's order, where
 * nothing further can match (a listing from web_filter_start() stops
 * there)? */
bool web_past_prefix(const web_filter *f, const char *id);
/* A run as the list shows it, reading its steps (for its tokens and
 * in-doubt calls) if @p budget has room for them; NULL on OOM. */
cJSON *web_run_summary(web *w, const pl_run_info *ri, size_t *budget);
/* A run whose record cannot be read (a listing met it damaged:
 * cli_runs_each()) as the list shows it: {"id", "state": "damaged",
 * "damaged": @p msg, the reason}.  NULL on OOM. */
cJSON *web_damaged_json(const char *id, const char *msg);
/* The status the list names: "crashed" for a run whose owner is gone. */
const char *web_status_name(const pl_run_info *ri);

/* ---- web_live.c ---- */

bool web_live_start(web *w);
/* What web_live_start() makes but its threads (no counts, no events). */
bool web_live_open(web *w);
void web_live_stop(web *w);
/* The counts as JSON members of @p into. */
bool web_counts_json(web *w, cJSON *into);

/* ---- web_overview.c ---- */

int api_overview(web *w, const web_req *r, cJSON **out);
/* The Server-Sent Events stream (web_http.c makes the response). */
bool web_sse_enter(web *w);
void web_sse_leave(web *w);
/* Wake every stream waiting for an event, as if its keep-alive were due:
 * one whose connection was cut finds out by writing. */
void web_sse_kick(web *w);
/* The next event after *seq into @p buf (at most @p n bytes), waiting up
 * to @p wait_ms; 0 when none (a keep-alive comment is written instead),
 * else its length.  -1 when stopping. */
long web_sse_next(web *w, uint64_t *seq, char *buf, size_t n, int wait_ms);

/* ---- web_actions.c ---- */

/* POST /api/runs/ID/ACTION and /api/batch/ACTION. */
int api_action(web *w, const char *id, const char *action, const web_req *r,
               cJSON **out);
int api_batch(web *w, const char *action, const web_req *r, cJSON **out);
/* The engine's event callback (the check's divergence). */
void web_on_event(const pl_event *ev, void *user);

#endif /* PL_WEB_H */
