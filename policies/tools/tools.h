/*
 * tools.h -- what the tool policies share: their settings (struct
 * pl_tools), reading a text file through the sandbox, and the one place
 * that turns bytes into a JSON string.
 */
#ifndef PL_TOOLS_H
#define PL_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "policyledger.h"
#include "util.h"

/* One allowed URL prefix: "file://", or scheme://host[:port]. */
typedef struct pl__allow {
    bool file;    /* "file://": paths under the sandbox */
    char *scheme; /* "http" or "https" (NULL for file) */
    char *host;   /* as libcurl gives it: "127.0.0.1", "[::1]", "localhost" */
    long port;    /* -1: any */
} pl__allow;

struct pl_tools {
    pl_sandbox *sb; /* NULL without a root */
    size_t max_file_bytes;
    size_t max_body_bytes;
    long connect_timeout_ms;
    long timeout_ms;
    int max_redirects;
    pl__allow *allow;
    size_t n_allow;
    bool curl_ready; /* curl_global_init() succeeded */
    /* run_command */
    bool commands; /* a program is allowed: register run_command */
    char **env;    /* "NAME" of each variable passed on */
    size_t n_env;
    long command_timeout_ms;
    size_t max_output_bytes;
    bool command_idempotent;
    pl_in_doubt command_in_doubt;
};

/* The policies, with a const pl_tools * as their user pointer. */
PL__HIDDEN int pl__tool_calculator(pl_ctx *ctx, const pl_action *action,
                                   pl_steps *out, void *user);
PL__HIDDEN int pl__tool_read_file(pl_ctx *ctx, const pl_action *action,
                                  pl_steps *out, void *user);
PL__HIDDEN int pl__tool_http_get(pl_ctx *ctx, const pl_action *action,
                                 pl_steps *out, void *user);
PL__HIDDEN int pl__tool_run_command(pl_ctx *ctx, const pl_action *action,
                                    pl_steps *out, void *user);

/*
 * Evaluate an arithmetic expression (calculator.c).  Returns PL_OK with
 * *out set, or PL_EINVAL with a message (pl_errmsg()) saying what is wrong
 * and where: every such failure is the caller's input.  PL_ENOMEM when the
 * "C" locale cannot be made.
 */
PL__HIDDEN int pl__calc_eval(double *out, const char *expr, size_t len);

/*
 * Read up to @p cap bytes of the regular file @p path under @p sb.  On
 * PL_OK *data (NUL-terminated, caller frees) holds *len bytes of valid
 * UTF-8 and *truncated says whether the file went on past the cap (the
 * cut falls on a character boundary).  Otherwise *code is the error-as-
 * data code for it and pl_errmsg() the message; a status other than
 * PL_ENOMEM is the caller's to report as data.
 */
PL__HIDDEN int pl__read_text(char **data, size_t *len, bool *truncated,
                             const char **code, const pl_sandbox *sb,
                             const char *path, size_t path_len, size_t cap);

/*
 * Check that @p len bytes are text: no NUL, valid UTF-8.  With @p cut set
 * (the bytes were cut at a cap), an incomplete character at the end is
 * dropped.  Returns the number of bytes to keep, or -1 (binary) with the
 * offset of the first bad byte in *bad.
 */
PL__HIDDEN long long pl__text_len(const char *p, size_t len, bool cut,
                                  size_t *bad);

#endif
