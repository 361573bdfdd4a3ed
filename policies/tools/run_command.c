/*
 * run_command.c -- the "run_command" tool: one allowed program, run as an
 * argument vector in its own process group under the sandbox directory,
 * with a reduced environment, a wall-clock timeout that kills the group,
 * and its output kept up to a cap (the rules are in policyledger.h).
 *
 * The child is made with fork() and execvp() (POSIX), in
 * base/platform.c's pl__child_exec(); what Linux adds, a death signal tied
 * to the engine and closing inherited descriptors, is its
 * pl__child_prepare().  The parent reads stdout and
 * stderr and writes stdin with poll(), keeping at most the cap of each
 * stream: past it, bytes are read and counted only.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "platform.h"
#include "root_call.h"
#include "tools.h"

#define MAX_ARGS 256
#define DRAIN_MS 2000 /* after a kill, the longest wait for the pipes */

/* One output stream: its pipe and what is kept of it. */
typedef struct stream {
    int fd; /* -1 once at its end */
    char *buf;
    size_t len;  /* kept */
    size_t seen; /* read in all */
} stream;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* pipe(), both ends close-on-exec (every child this file makes marks
 * what it inherited so too, pl__child_prepare()) */
static int cloexec_pipe(int fd[2])
{
    if (pipe(fd) != 0)
        return -1;
    fcntl(fd[0], F_SETFD, FD_CLOEXEC);
    fcntl(fd[1], F_SETFD, FD_CLOEXEC);
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Read what @p s has; keep it up to @p cap.  false at its end. */
static bool drain(stream *s, size_t cap)
{
    char chunk[16384];
    for (;;) {
        ssize_t n = read(s->fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        if (n <= 0) {
            close_fd(&s->fd);
            return false;
        }
        size_t keep = s->len < cap ? cap - s->len : 0;
        if (keep > (size_t)n)
            keep = (size_t)n;
        memcpy(s->buf + s->len, chunk, keep);
        s->len += keep;
        s->seen += (size_t)n;
    }
}

/* Put the output streams still open in @p pf; how many. */
static nfds_t output_fds(struct pollfd *pf, const stream *out,
                         const stream *err)
{
    nfds_t n = 0;
    if (out->fd >= 0)
        pf[n++] = (struct pollfd){out->fd, POLLIN, 0};
    if (err->fd >= 0)
        pf[n++] = (struct pollfd){err->fd, POLLIN, 0};
    return n;
}

/* Read what both streams have. */
static void drain_both(stream *out, stream *err, size_t cap)
{
    if (out->fd >= 0)
        drain(out, cap);
    if (err->fd >= 0)
        drain(err, cap);
}

/* The signal's name, "SIGKILL", or "SIG<number>". */
static const char *signal_name(char buf[16], int sig)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {
        {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},
        {SIGILL, "SIGILL"},   {SIGABRT, "SIGABRT"}, {SIGFPE, "SIGFPE"},
        {SIGKILL, "SIGKILL"}, {SIGSEGV, "SIGSEGV"}, {SIGPIPE, "SIGPIPE"},
        {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGBUS, "SIGBUS"},
        {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig)
            return names[i].name;
    snprintf(buf, 16, "SIG%d", sig);
    return buf;
}

/* @p len bytes as UTF-8 text of at most @p cap bytes: a NUL or a byte that
 * is not part of a valid character becomes U+FFFD (3 bytes), and the text
 * ends, on a character's boundary, where the next would pass @p cap
 * (*cut then).  With @p more (the stream went on past the bytes kept), a
 * character they end inside is one the cap cut: left out, not U+FFFD.
 * Caller frees. */
static char *as_text(const char *p, size_t len, bool more, size_t cap,
                     bool *cut)
{
    *cut = false;
    char *t = malloc((len < cap / 3 ? len * 3 : cap) + 1);
    if (!t)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t bad = 0;
        long long ok = pl__text_len(p + i, len - i, more, &bad);
        size_t good = ok >= 0 ? (size_t)ok : bad;
        if (ok >= 0 && good < len - i) /* the cap cut the last character */
            *cut = true;
        if (good > cap - o) { /* back to a character's start */
            good = cap - o;
            while (good > 0 && ((unsigned char)p[i + good] & 0xc0) == 0x80)
                good--;
            *cut = true;
        }
        memcpy(t + o, p + i, good);
        o += good;
        i += good;
        if (*cut)
            break;
        if (i < len) {
            if (cap - o < 3) {
                *cut = true;
                break;
            }
            memcpy(t + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    t[o] = '\0';
    return t;
}

/* The environment the command gets: the allowed variables that are set. */
static char **make_env(const pl_tools *t)
{
    char **env = calloc(t->n_env + 1, sizeof *env);
    size_t n = 0;
    for (size_t i = 0; env && i < t->n_env; i++) {
        const char *v = getenv(t->env[i]);
        if (v && !(env[n++] = pl__asprintf("%s=%s", t->env[i], v))) {
            for (size_t k = 0; k + 1 < n; k++)
                free(env[k]);
            free(env);
            return NULL;
        }
    }
    return env;
}

static void free_env(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}

/* What one run of the program came to. */
typedef struct outcome {
    stream out, err;
    int status;     /* waitpid()'s, when exited */
    bool exited;    /* the program ended (and was reaped) */
    bool timed_out; /* killed at the timeout */
    int exec_errno; /* the program could not be started: why */
} outcome;

/*
 * Run @p argv in @p dirfd with @p input (or /dev/null), for at most
 * @p timeout_ms, into @p r.  PL_OK (the outcome says how it went) or a
 * local failure (out of memory, no pipes, no fork).
 */
static int run(outcome *r, const pl_tools *t, char *const *argv, int dirfd,
               const char *input, int64_t timeout_ms)
{
    memset(r, 0, sizeof *r);
    r->out.fd = r->err.fd = -1;
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, pin[2] = {-1, -1}, px[2] = {-1, -1};
    int st = PL_OK;
    size_t cap = t->max_output_bytes;
    char **env = make_env(t);
    r->out.buf = malloc(cap);
    r->err.buf = malloc(cap);
    if (!env || !r->out.buf || !r->err.buf) {
        st = pl__err(PL_ENOMEM, "run_command: out of memory");
        goto fail;
    }
    /* stdin: a socket, so that writing to a program that has gone is
     * EPIPE (MSG_NOSIGNAL), never SIGPIPE */
    if (cloexec_pipe(po) || cloexec_pipe(pe) || cloexec_pipe(px) ||
        (input ? socketpair(AF_UNIX, SOCK_STREAM, 0, pin)
               : (pin[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)) {
        st = pl__err(PL_EIO, "run_command: cannot make pipes: %s",
                     strerror(errno));
        goto fail;
    }
    if (input) {
        fcntl(pin[0], F_SETFD, FD_CLOEXEC);
        fcntl(pin[1], F_SETFD, FD_CLOEXEC);
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        st = pl__err(PL_EIO, "run_command: cannot fork: %s", strerror(errno));
        goto fail;
    }
    if (pid == 0)
        pl__child_exec(parent, pin[0], po[1], pe[1], dirfd, px[1], argv, env);
    setpgid(pid, pid); /* also here: no race with the kill below */
    close_fd(&po[1]);
    close_fd(&pe[1]);
    close_fd(&px[1]);
    close_fd(&pin[0]);
    free_env(env);
    env = NULL;
    int e = 0;
    ssize_t got;
    do
        got = read(px[0], &e, sizeof e);
    while (got < 0 && errno == EINTR);
    close_fd(&px[0]);
    if (got == (ssize_t)sizeof e) { /* it never ran */
        close_fd(&pin[1]);
        close_fd(&po[0]);
        close_fd(&pe[0]);
        while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR)
            ;
        r->exec_errno = e ? e : ENOEXEC;
        return PL_OK;
    }
    r->out.fd = po[0];
    r->err.fd = pe[0];
    fcntl(r->out.fd, F_SETFL, O_NONBLOCK);
    fcntl(r->err.fd, F_SETFL, O_NONBLOCK);
    if (pin[1] >= 0)
        fcntl(pin[1], F_SETFL, O_NONBLOCK);
    size_t in_len = input ? strlen(input) : 0, in_off = 0;
    if (input && in_len == 0)
        close_fd(&pin[1]);
    int64_t now = mono_ms(); /* a timeout past the clock's end never comes */
    int64_t end = timeout_ms > INT64_MAX - now ? INT64_MAX : now + timeout_ms;
    bool ended = false; /* the leader has exited (not yet reaped) */
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (!ended &&
            waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            si.si_pid == pid)
            ended = true;
        if (ended && r->out.fd < 0 && r->err.fd < 0)
            break;
        int64_t left = end - mono_ms();
        if (left <= 0) {
            r->timed_out = true;
            break;
        }
        struct pollfd pf[3];
        nfds_t n = output_fds(pf, &r->out, &r->err);
        if (pin[1] >= 0)
            pf[n++] = (struct pollfd){pin[1], POLLOUT, 0};
        /* the leader's end is not a descriptor: look again now and then */
        int wait = (int)(left < 50 ? left : 50);
        if (poll(pf, n, wait) < 0 && errno != EINTR) {
            st = pl__err(PL_EIO, "run_command: poll: %s", strerror(errno));
            r->timed_out = true; /* so the group is killed below */
            break;
        }
        drain_both(&r->out, &r->err, cap);
        while (pin[1] >= 0 && in_off < in_len) {
            ssize_t w = send(pin[1], input + in_off, in_len - in_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                in_off += (size_t)w;
            else if (w < 0 && errno == EINTR)
                continue;
            else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            else
                close_fd(&pin[1]); /* it stopped reading: the rest is lost */
        }
        if (pin[1] >= 0 && in_off == in_len)
            close_fd(&pin[1]);
    }
    /* the whole group goes, while the leader (unreaped) still holds its
     * id, so the id names no other group */
    kill(-pid, SIGKILL);
    close_fd(&pin[1]);
    int64_t drain_end = mono_ms() + DRAIN_MS;
    while ((r->out.fd >= 0 || r->err.fd >= 0) && mono_ms() < drain_end) {
        struct pollfd pf[2];
        poll(pf, output_fds(pf, &r->out, &r->err), 50);
        drain_both(&r->out, &r->err, cap);
    }
    close_fd(&r->out.fd);
    close_fd(&r->err.fd);
    while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR)
        ;
    r->exited = true;
    return st;
fail:
    free_env(env);
    for (int i = 0; i < 2; i++) {
        close_fd(&po[i]);
        close_fd(&pe[i]);
        close_fd(&pin[i]);
        close_fd(&px[i]);
    }
    return st;
}

static void outcome_free(outcome *r)
{
    free(r->out.buf);
    free(r->err.buf);
}

/* The result (or, timed out, the Timeout error result carrying it). */
static int add_result(pl_steps *out, const outcome *r, size_t cap,
                      int64_t timeout_ms)
{
    bool cut_out, cut_err;
    char *so = as_text(r->out.buf, r->out.len, r->out.seen > r->out.len, cap,
                       &cut_out);
    char *se = as_text(r->err.buf, r->err.len, r->err.seen > r->err.len, cap,
                       &cut_err);
    cJSON *p = NULL;
    int st = so && se ? PL_OK
                      : pl__err(PL_ENOMEM, "run_command: out of memory");
    bool truncated = r->out.seen > r->out.len || r->err.seen > r->err.len ||
                     cut_out || cut_err;
    char note[200], sigbuf[16];
    snprintf(note, sizeof note,
             "output truncated: %zu bytes of stdout and %zu of stderr, of "
             "which each keeps its first %zu bytes of text",
             r->out.seen, r->err.seen, cap);
    bool exited = WIFEXITED(r->status);
    int sig = WIFSIGNALED(r->status) ? WTERMSIG(r->status) : 0;
    if (!st)
        st = pl_json_pack(&p, "{s:o, s:o, s:b, s:s, s:s, s:I, s:I, s:b, s:s*}",
                          "exit_code",
                          exited ? cJSON_CreateNumber(WEXITSTATUS(r->status))
                                 : cJSON_CreateNull(),
                          "signal",
                          sig ? cJSON_CreateString(signal_name(sigbuf, sig))
                              : cJSON_CreateNull(),
                          "timed_out", r->timed_out, "stdout", so, "stderr", se,
                          "stdout_bytes", (int64_t)r->out.seen, "stderr_bytes",
                          (int64_t)r->err.seen, "truncated", truncated, "note",
                          truncated ? note : NULL);
    if (!st && r->timed_out) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "the command ran past its timeout of %lld ms and was "
                 "killed with its process group",
                 (long long)timeout_ms);
        if (!cJSON_AddTrueToObject(p, "error") ||
            !cJSON_AddStringToObject(p, "code", PL_ERR_TIMEOUT) ||
            !cJSON_AddStringToObject(p, "message", msg))
            st = pl__err(PL_ENOMEM, "run_command: out of memory");
    }
    if (!st)
        st = pl_steps_add_result(out, p);
    cJSON_Delete(p);
    free(so);
    free(se);
    return st;
}

int pl__tool_run_command(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                         void *user)
{
    const pl_tools *t = user;
    /* as a run's root, a command not idempotent is called by the root: so
     * a crash while it runs gets its in-doubt rule (root_call.c) */
    bool called = false;
    int rst = t->command_idempotent ? PL_OK
                                    : pl__root_call(&called, ctx, action, out);
    if (rst || called)
        return rst;
    const cJSON *args = NULL;
    const char *cwd = NULL, *input = NULL;
    int64_t want_ms = 0;
    if (pl_json_unpack(action->payload, "{s:o, s?s, s?s, s?I !}", "argv", &args,
                       "cwd", &cwd, "stdin", &input, "timeout_ms", &want_ms))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, pl_errmsg());
    int argc = cJSON_GetArraySize(args);
    if (!cJSON_IsArray(args) || argc < 1 || argc > MAX_ARGS)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "argv must be an array of 1 to 256 "
                                  "strings");
    /* 0 is not "no timeout" (the schema's minimum is 1): refused, as a
     * negative one is */
    if (want_ms < 1 &&
        cJSON_GetObjectItemCaseSensitive(action->payload, "timeout_ms"))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                  "timeout_ms must be 1 or more");
    const char *argv[MAX_ARGS + 1];
    int i = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, args)
    {
        if (!cJSON_IsString(a))
            return pl_steps_add_error(out, PL_ERR_INVALID_INPUT,
                                      "argv must hold strings only");
        argv[i++] = a->valuestring;
    }
    argv[i] = NULL;
    /* the directory, resolved and opened through the sandbox */
    char *rel = NULL;
    const char *dir = cwd ? cwd : ".";
    size_t dir_len = strlen(dir);
    while (dir_len > 1 && dir[dir_len - 1] == '/') /* "sub/" is "sub" */
        dir_len--;
    int st = pl_sandbox_resolve(&rel, t->sb, dir, dir_len);
    int dirfd = -1;
    if (!st) /* O_NONBLOCK: a FIFO is refused below, not waited on */
        st = pl_sandbox_open_file(&dirfd, t->sb, rel, strlen(rel),
                                  O_RDONLY | O_NONBLOCK, 0);
    struct stat sst;
    if (!st && (fstat(dirfd, &sst) != 0 || !S_ISDIR(sst.st_mode)))
        st = pl__err(PL_EINVAL, "cwd '%.200s' is not a directory", cwd);
    if (!st)
        st = pl_sandbox_check_command_in(t->sb, rel, argv, (size_t)argc);
    free(rel);
    if (st) {
        if (dirfd >= 0)
            close(dirfd);
        if (st == PL_ENOMEM)
            return st;
        return pl_steps_add_error(out,
                                  st == PL_EFORBIDDEN  ? PL_ERR_FORBIDDEN
                                  : st == PL_ENOTFOUND ? PL_ERR_NOT_FOUND
                                                       : PL_ERR_INVALID_INPUT,
                                  pl_errmsg());
    }
    /* the timeout: the least of the call's, the options' and the
     * deadline's */
    int64_t timeout = t->command_timeout_ms;
    if (want_ms > 0 && want_ms < timeout)
        timeout = want_ms;
    int64_t deadline = pl_ctx_deadline(ctx);
    if (deadline) {
        int64_t left = deadline - real_ms();
        if (left < timeout)
            timeout = left > 0 ? left : 0;
    }
    outcome r;
    st = timeout > 0 ? run(&r, t, (char *const *)argv, dirfd, input, timeout)
                     : PL_OK;
    close(dirfd);
    if (timeout <= 0)
        return pl_steps_add_error(out, PL_ERR_TIMEOUT,
                                  "the call's deadline has passed: the "
                                  "command was not started");
    if (!st && r.exec_errno) {
        char msg[400];
        snprintf(msg, sizeof msg, "cannot run '%.200s': %s", argv[0],
                 strerror(r.exec_errno));
        st = pl_steps_add_error(out,
                                r.exec_errno == ENOENT ? PL_ERR_NOT_FOUND
                                                       : PL_ERR_FORBIDDEN,
                                msg);
    } else if (!st) {
        st = add_result(out, &r, t->max_output_bytes, timeout);
    }
    outcome_free(&r);
    return st;
}
