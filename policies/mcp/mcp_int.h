/*
 * mcp_int.h -- what mcp.c (handshake, tool list, registration),
 * mcp_rpc.c (JSON-RPC, the stdio transport) and mcp_call.c (a tool call
 * and its result) share.
 */
#ifndef PL_MCP_INT_H
#define PL_MCP_INT_H

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include <policyledger_mcp.h>

#include "mcp.h"
#include "platform.h"

/* "mcp:" NAME "." TOOL "@fnv1a64:" and 16 hex digits. */
#define PL__MCP_CODE_MAX (4 + 64 + 1 + PL_MAX_NAME + 26)
/* The runs whose tool list a handle remembers recording. */
#define PL__MCP_RUNS 64

typedef struct tool {
    pl_mcp *mcp;
    char *name;                  /* on the server */
    char code[PL__MCP_CODE_MAX]; /* its code identity: as listed at
                                    registration */
    unsigned long code_gen;      /* the list code_cur was found in */
    const char *code_cur;        /* its code identity in that list, or NULL
                                    when it lists the tool no more */
    bool idempotent;             /* as registered (mcp_call.c: a run's
                                    root) */
} tool;

/* A run, and the fingerprint of the tool list last recorded in it. */
typedef struct run_seen {
    char id[PL_MAX_RUN_ID + 1];
    char fingerprint[32];
} run_seen;

struct pl_mcp {
    pid_t owner; /* the process whose server, pipes and session these are:
                    another (a child made by fork()) drops its copies of
                    them at its first use (pl__mcp_lock()) */
    struct pl_mcp *next_open; /* the process's handles (fork) */
    char *name;
    char **argv;
    char **env;
    int err_fd; /* the server's stderr; -1: ours */
    long timeout_ms, start_timeout_ms;
    size_t max_msg, max_inline;
    pthread_mutex_t lock;
    pl__mcp_http *http;  /* Streamable HTTP; NULL: stdio */
    bool up;             /* HTTP: initialized */
    long retry_after_ms; /* HTTP: the last request's Retry-After; -1: none */
    pid_t pid;           /* stdio: 0 when not running */
    int wfd, rfd;
    int64_t rcv_ms; /* rfd's receive timeout as last set; 0: not set */
    char *buf;      /* what was read and not yet taken: max_msg + 1 bytes */
    size_t len;
    pl__buf out; /* the message being sent, its room kept for the next */
    int64_t next_id;
    char version[16];
    char fingerprint[32];   /* "fnv1a64:" and 16 hex digits: the tool list */
    cJSON *list;            /* the tool list as last listed */
    cJSON *codes;           /* each listed tool's code identity, in order */
    int list_size;          /* how many tools it lists */
    unsigned long list_gen; /* counts the lists taken, from 1 */
    bool list_changed;      /* the server said so (or restarted) since */
    bool quiet; /* stdio: the last drain found the server's output open and
                   empty, so it runs (pl__mcp_ensure() need not ask) */
    run_seen runs[PL__MCP_RUNS];
    size_t next_run;
    size_t last_seen; /* the entry of runs seen() found last: a run's calls
                         look it up three times each, so it goes first */
    tool *tools;
    size_t n_tools;
};

static inline int64_t pl__mcp_mono_ms(void)
{
    return (int64_t)(pl__mono_ns() / 1000000);
}

static inline void pl__mcp_close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static inline int pl__mcp_cloexec(int fd)
{
    return fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static inline const char *pl__mcp_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Take the handle's lock.  In a child made by fork() (the handle's owner
 * is another process), its first use first drops what the parent's
 * handle held, telling the server nothing: a call then starts a server
 * or a session of the child's own (mcp.c). */
PL__HIDDEN void pl__mcp_lock(pl_mcp *m);

/* Stop the server: its input closed, then SIGTERM, then SIGKILL, each to
 * its process group (mcp_rpc.c). */
PL__HIDDEN void pl__mcp_stop(pl_mcp *m);

/* Start the stdio server.  T_OK, or T_DEAD with @p why set. */
PL__HIDDEN int pl__mcp_spawn(pl_mcp *m, char *why, size_t n);

/* Send the notification @p method with @p params (taken) over the
 * handle's transport: T_OK, or the T_ code of its failure with @p why set
 * (T_EXPIRED: the session ended, the next request begins a new one). */
PL__HIDDEN int pl__mcp_notify(pl_mcp *m, const char *method, cJSON *params,
                              char *why, size_t n);

/*
 * Send the request @p method with @p params (taken) and read its answer:
 * *result or *error, one of them set on T_OK; caller frees (mcp_rpc.c).
 */
PL__HIDDEN int pl__mcp_rpc(pl_mcp *m, const char *method, cJSON *params,
                           int64_t deadline, cJSON **result, cJSON **error,
                           char *why, size_t n);

/* Append a request's params, as JSON text, to @p b: false when out of
 * memory. */
typedef bool (*pl__mcp_params_fn)(pl__buf *b, const void *user);

/* pl__mcp_rpc() with the params written by @p params (@p user its
 * argument) straight into the message, no tree made of them. */
PL__HIDDEN int pl__mcp_rpc_with(pl_mcp *m, const char *method,
                                pl__mcp_params_fn params, const void *user,
                                int64_t deadline, cJSON **result, cJSON **error,
                                char *why, size_t n);

/* Append @p v as compact JSON, or @p s as a JSON string, to @p b as cJSON
 * prints them: false when out of memory (mcp_rpc.c). */
PL__HIDDEN bool pl__mcp_append_json(pl__buf *b, const cJSON *v);
PL__HIDDEN bool pl__mcp_append_string(pl__buf *b, const char *s);

/* Start the server if it is not running, and perform the handshake. */
PL__HIDDEN int pl__mcp_ensure(pl_mcp *m, int64_t deadline, char *why, size_t n);

/* List the tools again (after notifications/tools/list_changed or a
 * restart): m->list, m->codes and m->fingerprint become the new list's.
 * PL_OK, or an error with the old list kept. */
PL__HIDDEN int pl__mcp_relist(pl_mcp *m, int64_t deadline);

/* Take @p list (a tools/list result's tools, gathered; taken) as the
 * server's and register a policy for each of its tools in @p reg: every
 * name and input schema is checked first (mcp.c). */
PL__HIDDEN int pl__mcp_take_list(pl_mcp *m, pl_registry *reg, cJSON *list,
                                 const pl_mcp_options *o);

/* The step of a tools/call answer: the error taxonomy's error for
 * @p error (when not NULL) or for a result that is one, else the result,
 * whose parts it takes, as action_result (mcp_call.c). */
PL__HIDDEN int pl__mcp_answer_steps(pl_steps *out, const pl_mcp *m,
                                    const char *tname, cJSON *result,
                                    const cJSON *error);

/*
 * Take the next JSON object of the lines read into m->buf, dropping what
 * it read: 1 and *out (caller frees); 0 when no whole line is left; -1
 * when memory ran out reading a line (dropped: the exchange fails).  A
 * line that is not a JSON object is skipped and counted in *garbage
 * (mcp_rpc.c).
 */
PL__HIDDEN int pl__mcp_take_msg(pl_mcp *m, cJSON **out, size_t *garbage);

/* Read what the server sent while no request was in flight
 * (notifications, its requests), without waiting; m->quiet says whether
 * there was nothing, its output still open. */
PL__HIDDEN void pl__mcp_drain(pl_mcp *m);

/* The policy of every tool; @p user is its tool (mcp_call.c). */
PL__HIDDEN int pl__mcp_call_tool(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                                 void *user);

#endif
