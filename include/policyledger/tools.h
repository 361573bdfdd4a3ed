/*
 * policyledger/tools.h -- the sandbox (paths under a directory, commands from an allowlist),
 * tools for models, built-in policies.
 *
 * Part of the manual <policyledger.h>, which includes it: include that,
 * not this.
 */
#ifndef POLICYLEDGER_TOOLS_H
#define POLICYLEDGER_TOOLS_H

#ifndef POLICYLEDGER_H
#error "include <policyledger.h>, not <policyledger/tools.h>"
#endif

/* The manual is laid out by hand (aligned comments, one-line _INIT macros). */
/* clang-format off */

/* ------------------------------------------------------------------------ */
/* Sandbox: paths under a directory, commands from an allowlist             */
/* ------------------------------------------------------------------------ */

/*
 * A sandbox confines what a tool may touch to one working directory (held
 * open as a directory descriptor from pl_sandbox_new() on) and a list of
 * programs.  The rules, as the code keeps them:
 *
 *   - A path is relative to the directory, or absolute and inside it (its
 *     canonical path, pl_sandbox_root(), followed by '/' or nothing).
 *   - ".." may go up only as far as the directory itself.
 *   - A symlink is followed only when its target is relative and stays
 *     inside; an absolute target, or one that climbs out, is refused.  At
 *     most 40 symlinks are followed per path.
 *   - A path is 1..4095 bytes, each component at most 255, with no NUL and
 *     no control byte (0x01-0x1f, 0x7f).
 *   - pl_sandbox_open_file() never follows a symlink it has not checked:
 *     it opens with openat2(2) and RESOLVE_BENEATH where the kernel has it
 *     (and no seccomp filter refuses it), and otherwise walks the path one
 *     component at a time with openat(O_NOFOLLOW), reading each symlink
 *     itself.  So a symlink swapped in after pl_sandbox_resolve() and
 *     before the open is refused by the open.
 *   - Hard links and mounts inside the directory are not seen as exits:
 *     whoever can make them there reaches those files anyway.
 *   - A command is an argument vector, never a shell line: its program
 *     (argv[0]) must be one of the allowed names exactly (no path, no '/'),
 *     and no argument may hold a control byte.  Allowing a shell allows
 *     everything it can run.
 *
 * Refusals are PL_EFORBIDDEN with a message naming the path or program and
 * the rule it broke.  A sandbox is read-only after pl_sandbox_new(): threads
 * may share it.
 */

/** A working directory and a command allowlist.  Opaque. */
typedef struct pl_sandbox pl_sandbox;

/** Version 2 appended path_commands; a version 1 struct is still taken. */
#define PL_SANDBOX_OPTIONS_VERSION 2

/** Sandbox options.  Initialise with PL_SANDBOX_OPTIONS_INIT. */
typedef struct pl_sandbox_options {
    unsigned version;             /**< PL_SANDBOX_OPTIONS_VERSION */
    const char *const *commands;  /**< program names allowed; may be NULL */
    size_t n_commands;            /**< entries in commands */
    /** true: never use openat2(2), always walk paths component by
        component (the fallback for kernels without it). */
    bool walk_only;
    /** Since version 2: programs allowed too, whose arguments are paths
     *  that must stay under the root (see pl_sandbox_check_command()):
     *  "cat", "ls", "wc", ...  May be NULL. */
    const char *const *path_commands;
    size_t n_path_commands;       /**< entries in path_commands */
} pl_sandbox_options;

#define PL_SANDBOX_OPTIONS_INIT                                                \
    { PL_SANDBOX_OPTIONS_VERSION, NULL, 0, false, NULL, 0 }

/**
 * Create a sandbox on the directory @p root (which must exist), with the
 * command allowlist of @p opts.
 * @param[out] out caller owns; free with pl_sandbox_free().
 * @param opts NULL for defaults (no command allowed).
 * @return PL_OK; PL_EINVAL (NULL argument, an empty @p root, wrong options
 *         version, an empty command name or one with '/' or a control
 *         byte); PL_ENOTFOUND (no such directory); PL_EIO (not a
 *         directory, or it cannot be opened); PL_ENOMEM.
 */
int pl_sandbox_new(pl_sandbox **out, const char *root,
                   const pl_sandbox_options *opts);

/** Free a sandbox (and close its directory).  NULL does nothing. */
void pl_sandbox_free(pl_sandbox *sb);

/** @return the directory's canonical absolute path (borrowed, valid until
 *          pl_sandbox_free()). */
const char *pl_sandbox_root(const pl_sandbox *sb);

/**
 * Resolve a path under the sandbox, following the symlinks it meets (by
 * the rules above), and give its canonical form relative to the root.
 * Every component but the last must exist; the last may not (a file to be
 * created), and is then given as it is named.  A check, not a capability:
 * open with pl_sandbox_open_file(), which checks again as it opens.
 * @param[out] out the relative path ("." for the root itself, else
 *             "dir/file", no "." or ".." or symlink in it); caller owns,
 *             free with free().
 * @param path @p len bytes (a C string's strlen(); a NUL inside is refused).
 * @return PL_OK; PL_EFORBIDDEN (outside the sandbox: an absolute path
 *         elsewhere, ".." above the root, a symlink that leaves it or is
 *         absolute); PL_EINVAL (NULL argument, empty path, NUL or control
 *         byte); PL_ELIMIT (path or component too long, too many
 *         symlinks); PL_ENOTFOUND (a missing directory on the way, or a
 *         component on the way that is a file); PL_EIO; PL_ENOMEM.
 */
int pl_sandbox_resolve(char **out, const pl_sandbox *sb, const char *path,
                       size_t len);

/**
 * Open a file under the sandbox, as openat(2) would with @p flags and
 * @p mode, never leaving it (see the rules above).  O_CLOEXEC is always
 * added.  With O_NOFOLLOW in @p flags a symlink as the last component is
 * refused (PL_EFORBIDDEN) instead of followed.
 * @param[out] out_fd the new descriptor; caller owns, close() it.  -1 on
 *             failure.
 * @param flags open(2) flags (O_RDONLY, O_WRONLY | O_CREAT, ...).
 * @param mode the mode of a file O_CREAT makes.
 * @return as pl_sandbox_resolve(), plus PL_ENOTFOUND (no such file), PL_EIO
 *         (the open failed otherwise: permission, a directory opened for
 *         writing, ...; the message says which).
 */
int pl_sandbox_open_file(int *out_fd, const pl_sandbox *sb, const char *path,
                         size_t len, int flags, unsigned mode);

/**
 * Check a command against the allowlist: argv[0] must be an allowed
 * program name exactly, and no argument may hold a control byte.  Nothing
 * is run; a command that passes is to be run with execvp()-like calls,
 * never through a shell.
 *
 * For a program of path_commands, its path arguments must stay under the
 * root: every argument that does not start with '-' ("-" alone is standard
 * input), every argument after "--", and the value of "--name=value".
 * Relative ones are taken from the root.  A path is refused when it is
 * absolute and elsewhere, when its ".." climb above the root as written
 * (even through parts that do not exist yet: a program may make them), or
 * when a symlink on its way leaves the root (pl_sandbox_resolve()), also
 * one reached past missing directories a program may make ("x/../out",
 * x missing, out a symlink that leaves); a missing part is left for the
 * program to meet.  A short option with a
 * '/' or a ".." in its attached value ("-f/etc/x", "-C..") is refused:
 * give the path as an argument of its own; so is an argument starting with
 * '-' that names a symlink that leaves, attached ("-tout") or as the whole
 * of it (an option's value, "-t" "-o").  This checks the arguments as
 * given: it does not confine what the program then opens.
 * @param argv @p argc C strings, argc >= 1.
 * @return PL_OK; PL_EFORBIDDEN (program not allowed, or given as a path; a
 *         path argument outside the root); PL_EINVAL (NULL argument, argc
 *         0, an empty program name, a control byte in an argument);
 *         PL_ELIMIT (a path argument too long).
 */
int pl_sandbox_check_command(const pl_sandbox *sb, const char *const *argv,
                             size_t argc);

/**
 * pl_sandbox_check_command() for a command run in the directory @p cwd
 * under the root (a path pl_sandbox_resolve() gave, or NULL for the root):
 * relative path arguments are taken from it.
 * @return as pl_sandbox_check_command().
 */
int pl_sandbox_check_command_in(const pl_sandbox *sb, const char *cwd,
                                const char *const *argv, size_t argc);

/* ------------------------------------------------------------------------ */
/* Tools for models: calculator, read_file, http_get, run_command          */
/* ------------------------------------------------------------------------ */

/*
 * Three tool policies, each registered with a description and an input
 * JSON Schema so that a model sees them as tool definitions.  Every failure
 * a caller can cause or meet is an error-as-data result, never a status:
 *
 *   calculator  {"expression": "2 * (3 + 4) ^ 2"} -> {"result": 98}
 *               + - * / % ^ (right-associative, above unary minus),
 *               parentheses, unary minus and plus, decimals with an
 *               optional exponent.  InvalidInput: bad syntax (with the
 *               offset), division or remainder by zero, a result that
 *               overflows to inf or is not a number, more than
 *               PL_TOOLS_MAX_EXPRESSION bytes, nesting deeper than
 *               PL_TOOLS_MAX_NESTING.
 *   read_file   {"path": "notes/a.txt"} -> {"path": "notes/a.txt",
 *               "content": "...", "bytes": N, "truncated": false}
 *               A UTF-8 text file under the sandbox directory (rules of
 *               pl_sandbox_open_file()).  Past max_file_bytes the content
 *               is cut there (at a character boundary), "truncated" is
 *               true and "note" says so.  NotFound; Forbidden (an escape);
 *               InvalidInput (a bad path, a directory, a special file:
 *               FIFO, socket or device; a binary file).
 *   http_get    {"url": "http://127.0.0.1:8080/x"} -> {"url": final URL,
 *               "status": 200, "content_type": "...", "body": "...",
 *               "bytes": N, "truncated": false}
 *               A GET over libcurl, only to allowed URLs (below), each
 *               redirect checked again, at most max_redirects of them, and
 *               never to a file:// URL; no proxy (the environment's
 *               http_proxy is ignored); it sends the call's idempotency key
 *               (pl_ctx_idempotency_key()) as Idempotency-Key.  A
 *               body past max_body_bytes is cut as read_file's is.  404
 *               and 410 NotFound, 401 Unauthorized, 403 Forbidden, 429
 *               RateLimited (the message carries Retry-After), 5xx
 *               RetryableServer, other 4xx InvalidInput; a timeout
 *               Timeout (timeout_ms, or the call's deadline,
 *               pl_ctx_deadline(), when it comes first; one already
 *               passed sends nothing); a refused connection
 *               RetryableServer; a URL or
 *               redirect outside the allowlist Forbidden.  file:// URLs
 *               read through the sandbox, as read_file does.
 *
 *   run_command {"argv": ["ls", "-l", "notes"], "cwd": "sub",
 *               "stdin": "text", "timeout_ms": 5000}
 *               -> {"exit_code": 0, "signal": null, "timed_out": false,
 *                   "stdout": "...", "stderr": "...", "stdout_bytes": N,
 *                   "stderr_bytes": N, "truncated": false}
 *               One program, run as an argument vector, never through a
 *               shell, only when the sandbox allows it
 *               (pl_sandbox_check_command_in(): argv[0] one of commands
 *               or path_commands, and for the latter every path argument
 *               under the root: "..", absolute paths and symlinks that
 *               leave it are refused), before anything runs.  It runs in
 *               its own process group, in the directory cwd under the
 *               root (default the root), with only the environment
 *               variables the options allow, standard input the given
 *               "stdin" or /dev/null, every other descriptor closed, and
 *               is killed (SIGKILL) with it if the engine's process dies.
 *               Its output is read until every process of the group has
 *               closed it and the program has ended, at most the timeout
 *               (the least of "timeout_ms", command_timeout_ms and the
 *               call's deadline, pl_ctx_deadline()); then, or at the
 *               timeout, the whole group is killed, so nothing it started
 *               outlives the call (but a process that left the group).
 *               Each of stdout and stderr is kept up to max_output_bytes
 *               of text, bytes that are not UTF-8 as U+FFFD (3 bytes
 *               each), cut on a character's boundary (the rest is read
 *               and counted, not kept: memory stays bounded); "truncated"
 *               and a "note" say so.  A program that exits non-zero or
 *               dies of a signal is a result ("exit_code" null and
 *               "signal": "SIGSEGV"), for the caller to read.  Forbidden
 *               (the sandbox refused it: the message says why);
 *               InvalidInput (bad arguments, a cwd that is not a
 *               directory); NotFound (no such program on the allowed
 *               PATH, or no such cwd); Timeout (killed at the timeout:
 *               the error result carries every field above, with the
 *               output read until then).  Registered only with a root and
 *               allowed commands.
 *
 * The first three are registered idempotent: none changes anything outside
 * itself (the calculator is pure, read_file reads, a GET is safe by HTTP's
 * rules), so re-running one after a crash is harmless.  run_command is
 * not (command_idempotent false by default): its action_call is durable
 * before the program starts, and a crash while it runs gives its call the
 * in-doubt rule (command_in_doubt, by default PL_IN_DOUBT_FAIL: an
 * "InDoubt" error result), never a second run.  Run as a run's root, it
 * calls itself, so that the same holds (the root's ledger holds the call
 * and its action_result, the run's result).  Results are recorded like
 * any call's: replay serves them and does not run the tool.
 */

#define PL_TOOLS_MAX_EXPRESSION 4096 /**< longest calculator input, bytes */
#define PL_TOOLS_MAX_NESTING 64      /**< deepest parentheses and unary
                                          operators in an expression */

/** The tools' shared settings.  Opaque. */
typedef struct pl_tools pl_tools;

/** Version 2 appended the run_command fields; a version 1 struct is still
 *  taken (no run_command). */
#define PL_TOOLS_OPTIONS_VERSION 2

/** Tool options.  Initialise with PL_TOOLS_OPTIONS_INIT. */
typedef struct pl_tools_options {
    unsigned version;          /**< PL_TOOLS_OPTIONS_VERSION */
    /** The sandbox directory of read_file and of file:// URLs.  NULL:
        read_file is not registered and no file:// URL is allowed. */
    const char *root;
    /** read_file's cap; 0 = 1 MiB, at most 1 GiB.  A result must fit
        the engine's max_payload (16 MiB by default), so keep the caps
        below it. */
    size_t max_file_bytes;
    /**
     * Allowed URL prefixes as "scheme://host" or "scheme://host:port"
     * (scheme http or https; host compared without case) or "file://".
     * NULL (n_allow 0): "file://" (with a root) and loopback http only,
     * "http://127.0.0.1", "http://localhost", "http://[::1]".
     */
    const char *const *allow;
    size_t n_allow;            /**< entries in allow */
    long connect_timeout_ms;   /**< 0 = 5000 */
    long timeout_ms;           /**< whole request, its redirects
                                    included; 0 = 30000 */
    size_t max_body_bytes;     /**< http_get's cap; as max_file_bytes */
    int max_redirects;         /**< redirects followed; -1 = 5, 0 = none */
    /* Since version 2: run_command, registered when root is set and a
     * program is allowed (the sandbox's commands and path_commands). */
    const char *const *commands;      /**< programs run_command may run */
    size_t n_commands;
    const char *const *path_commands; /**< ... whose arguments are paths
                                           under the root */
    size_t n_path_commands;
    /** Environment variables a command gets from the engine's process, by
     *  name; NULL (n_env 0): PATH, LANG, LC_ALL, TZ.  Every other variable
     *  is left out. */
    const char *const *env;
    size_t n_env;
    long command_timeout_ms;   /**< the longest a command runs; 0 = 10000 */
    size_t max_output_bytes;   /**< kept of each of stdout and stderr;
                                    0 = 64 KiB, at most 16 MiB.  Both are
                                    in one result, which must fit the
                                    engine's max_payload (16 MiB by
                                    default): keep the cap under half of
                                    it, or the run fails */
    bool command_idempotent;   /**< default false (see above) */
    pl_in_doubt command_in_doubt; /**< default PL_IN_DOUBT_FAIL */
} pl_tools_options;

#define PL_TOOLS_OPTIONS_INIT                                                  \
    { PL_TOOLS_OPTIONS_VERSION, NULL, 0, NULL, 0, 0, 0, 0, -1, NULL, 0, NULL, \
      0, NULL, 0, 0, 0, false, PL_IN_DOUBT_FAIL }

/**
 * Check the options and make the tools' settings (opening the sandbox).
 * @param[out] out caller owns; free with pl_tools_free() after every engine
 *             whose registry holds the tools is closed.
 * @param opts NULL for defaults.
 * @return PL_OK; PL_EINVAL (wrong version, a malformed allow entry, a
 *         negative timeout, max_redirects below -1, a cap past 1 GiB);
 *         the errors of
 *         pl_sandbox_new() for root; PL_EIO (libcurl cannot be
 *         initialised); PL_ENOMEM.
 * @note Calls curl_global_init() (and pl_tools_free() its cleanup): with
 *       libcurl before 7.84, call it before other threads use libcurl.
 */
int pl_tools_new(pl_tools **out, const pl_tools_options *opts);

/** Free the tools' settings.  NULL does nothing. */
void pl_tools_free(pl_tools *tools);

/**
 * Register "calculator", "http_get" and, with a root, "read_file" (and,
 * with allowed commands, "run_command") in @p reg.  A library built
 * without libcurl (PL_WITH_CURL=OFF) has no "http_get": pl_tools_new()
 * refuses an http:// or https:// allow entry there, saying so.  All or
 * none: every name is checked first, so PL_EEXIST registers none, and
 * a later failure (PL_ENOMEM) takes back those it had added.
 * @param tools borrowed: must outlive every engine using @p reg.
 * @return PL_OK; PL_EINVAL (NULL argument); PL_EEXIST (a name is taken);
 *         PL_ENOMEM.
 */
int pl_tools_register(pl_registry *reg, const pl_tools *tools);

/* ------------------------------------------------------------------------ */
/* Built-in policies                                                        */
/* ------------------------------------------------------------------------ */

/**
 * Register a human-in-the-loop policy under @p name.  A call to it suspends
 * the run with the call's payload as the prompt (the outcome carries it and
 * a resume token); pl_run_resume() with an answer (a JSON object) continues
 * the run, and the call returns that answer as its result.
 * @return as pl_registry_add().
 */
int pl_registry_add_human(pl_registry *reg, const char *name);

/* clang-format on */

#endif /* POLICYLEDGER_TOOLS_H */
