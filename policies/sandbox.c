/*
 * sandbox.c -- paths confined to a working directory: the sandbox, and
 * its paths resolved and opened (the rules are in policyledger.h,
 * "Sandbox"; the walk is sandbox_walk.c, commands sandbox_cmd.c).
 *
 * The directory is held open from pl_sandbox_new() on, so a rename of it
 * or of its parents changes nothing: every lookup starts at that
 * descriptor.  Two ways to look a path up, with the same rules:
 *
 *   openat2   pl_sandbox_open_file() asks the kernel for RESOLVE_BENEATH
 *             (base/platform.c), which refuses ".." above the directory and
 *             absolute or escaping symlinks at every step of its own walk.
 *   the walk  everything else, and the open where openat2 is missing
 *             (ENOSYS, or EPERM from a seccomp filter), or walk_only: one
 *             component at a time, never following a symlink but reading
 *             it and walking its target by the same rules, on a stack of
 *             directory descriptors of its own (sandbox_walk.c).
 *
 * Either way every symlink is checked where it is met, during the open
 * itself (by the kernel's RESOLVE_BENEATH, or by the walk, for which the
 * kernel never follows one), so a symlink swapped in between a check and an
 * open is met by the open.
 */
#define _GNU_SOURCE /* O_PATH */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "platform.h"
#include "sandbox_int.h"

/* ---- checks on strings --------------------------------------------------- */

/* Check a path's bytes: 1..SB_PATH_MAX, no NUL, no control byte. */
int pl__sb_check_path_bytes(const char *path, size_t len)
{
    if (!path)
        return pl__err(PL_EINVAL, "sandbox: NULL path");
    if (len == 0)
        return pl__err(PL_EINVAL, "sandbox: empty path");
    if (len > SB_PATH_MAX)
        return pl__err(PL_ELIMIT,
                       "sandbox: path of %zu bytes is longer than %d", len,
                       SB_PATH_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)path[i];
        if (c == 0)
            return pl__err(PL_EINVAL,
                           "sandbox: path '%.*s' holds a NUL byte at offset "
                           "%zu",
                           (int)i, path, i);
        if (pl__sb_is_ctl(c))
            return pl__err(PL_EINVAL,
                           "sandbox: path '%.*s...' holds the control byte "
                           "0x%02x at offset %zu",
                           (int)i, path, c, i);
    }
    return PL_OK;
}

/* ---- the sandbox --------------------------------------------------------- */

static bool command_name_ok(const char *s)
{
    if (!s || !*s || strlen(s) > SB_NAME_MAX)
        return false;
    for (const char *p = s; *p; p++)
        if (*p == '/' || pl__sb_is_ctl((unsigned char)*p))
            return false;
    return true;
}

int pl_sandbox_new(pl_sandbox **out, const char *root,
                   const pl_sandbox_options *opts)
{
    if (out)
        *out = NULL;
    if (!out || !root || !*root)
        return pl__err(PL_EINVAL, "pl_sandbox_new: %s",
                       !out    ? "NULL out"
                       : !root ? "NULL root"
                               : "empty root");
    pl_sandbox_options o;
    if (pl__struct_in(&o, opts, &pl__sandbox_options_layout, "pl_sandbox_new"))
        return PL_EINVAL;
    opts = &o;
    const char *const *pcmds = opts->path_commands;
    size_t n_pcmds = opts->n_path_commands;
    if ((opts->n_commands && !opts->commands) || (n_pcmds && !pcmds))
        return pl__err(PL_EINVAL, "pl_sandbox_new: %zu commands, NULL list",
                       opts->n_commands ? opts->n_commands : n_pcmds);
    for (size_t i = 0; i < opts->n_commands + n_pcmds; i++)
        if (!command_name_ok(i < opts->n_commands
                                 ? opts->commands[i]
                                 : pcmds[i - opts->n_commands]))
            return pl__err(PL_EINVAL,
                           "pl_sandbox_new: command %zu is not a program name "
                           "(empty, too long, or holds '/' or a control byte)",
                           i);

    int st = PL_OK;
    pl_sandbox *sb = calloc(1, sizeof *sb);
    if (!sb)
        return pl__err(PL_ENOMEM, "pl_sandbox_new: out of memory");
    sb->dirfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (sb->dirfd < 0) {
        int e = errno;
        st = pl__err(e == ENOENT ? PL_ENOTFOUND : PL_EIO,
                     "pl_sandbox_new: cannot open directory '%s': %s", root,
                     strerror(e));
        goto done;
    }
    /* The canonical path of what we hold open, not of the name (which
     * could change between a realpath() and the open). */
    char proc[64], buf[PATH_MAX];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", sb->dirfd);
    ssize_t n = readlink(proc, buf, sizeof buf - 1);
    if (n <= 0 || buf[0] != '/') {
        char *r = realpath(root, NULL);
        if (!r) {
            st = pl__err(PL_EIO, "pl_sandbox_new: cannot resolve '%s': %s",
                         root, strerror(errno));
            goto done;
        }
        sb->root = r;
    } else {
        sb->root = pl__strndup(buf, (size_t)n);
    }
    if (!sb->root) {
        st = pl__err(PL_ENOMEM, "pl_sandbox_new: out of memory");
        goto done;
    }
    sb->root_len = strlen(sb->root);
    size_t n_all = opts->n_commands + n_pcmds;
    if (n_all) {
        sb->commands = calloc(n_all, sizeof *sb->commands);
        sb->paths = calloc(n_all, sizeof *sb->paths);
        if (!sb->commands || !sb->paths) {
            st = pl__err(PL_ENOMEM, "pl_sandbox_new: out of memory");
            goto done;
        }
        for (size_t i = 0; i < n_all; i++) {
            bool path = i >= opts->n_commands;
            sb->commands[i] = pl__strdup(path ? pcmds[i - opts->n_commands]
                                              : opts->commands[i]);
            sb->paths[i] = path;
            if (!sb->commands[i]) {
                st = pl__err(PL_ENOMEM, "pl_sandbox_new: out of memory");
                goto done;
            }
            sb->n_commands++;
        }
    }
    sb->walk_only = opts->walk_only;
done:
    if (st)
        pl_sandbox_free(sb);
    else
        *out = sb;
    return st;
}

void pl_sandbox_free(pl_sandbox *sb)
{
    if (!sb)
        return;
    if (sb->dirfd >= 0)
        close(sb->dirfd);
    free(sb->root);
    for (size_t i = 0; i < sb->n_commands; i++)
        free(sb->commands[i]);
    free(sb->commands);
    free(sb->paths);
    free(sb);
}

const char *pl_sandbox_root(const pl_sandbox *sb)
{
    return sb ? sb->root : NULL;
}

/*
 * Turn the caller's path into one relative to the root: an absolute path
 * must be the root or below it.  Sets *rel to the part after the root
 * (possibly empty: the root itself).
 */
int pl__sb_relative_part(const char **rel, size_t *rel_len,
                         const pl_sandbox *sb, const char *path, size_t len)
{
    if (path[0] != '/') {
        *rel = path;
        *rel_len = len;
        return PL_OK;
    }
    size_t rl = sb->root_len;
    if (rl == 1) { /* the root is "/" */
        size_t i = 0;
        while (i < len && path[i] == '/')
            i++;
        *rel = path + i;
        *rel_len = len - i;
        return PL_OK;
    }
    if (len >= rl && memcmp(path, sb->root, rl) == 0 &&
        (len == rl || path[rl] == '/')) {
        size_t i = rl;
        while (i < len && path[i] == '/')
            i++;
        *rel = path + i;
        *rel_len = len - i;
        return PL_OK;
    }
    return pl__err(PL_EFORBIDDEN,
                   "sandbox: absolute path '%.*s' is outside '%s'", (int)len,
                   path, sb->root);
}

/* ---- resolve and open ---------------------------------------------------- */

int pl_sandbox_resolve(char **out, const pl_sandbox *sb, const char *path,
                       size_t len)
{
    if (out)
        *out = NULL;
    if (!out || !sb)
        return pl__err(PL_EINVAL, "pl_sandbox_resolve: NULL %s",
                       !out ? "out" : "sandbox");
    int st = pl__sb_check_path_bytes(path, len);
    if (st)
        return st;
    const char *rel;
    size_t rel_len;
    st = pl__sb_relative_part(&rel, &rel_len, sb, path, len);
    if (st)
        return st;
    sb_walk w;
    int fd = -1;
    char last[SB_NAME_MAX + 1] = "";
    pl__buf b = {0};
    st = pl__sb_walk_init(&w, sb, path, len, rel, rel_len);
    if (!st)
        st = pl__sb_walk_run(&w, -1, 0, false, &fd, last);
    if (st) {
        pl__sb_walk_free(&w);
        return st;
    }
    for (size_t i = 1; !st && i <= w.depth; i++) {
        if (b.len)
            st = pl__buf_append(&b, "/", 1);
        if (!st)
            st = pl__buf_append(&b, w.names[i], strlen(w.names[i]));
    }
    if (!st && last[0]) {
        if (b.len)
            st = pl__buf_append(&b, "/", 1);
        if (!st)
            st = pl__buf_append(&b, last, strlen(last));
    }
    if (!st && !b.len)
        st = pl__buf_append(&b, ".", 1);
    if (!st)
        st = pl__buf_append(&b, "", 1);
    pl__sb_walk_free(&w);
    if (st) {
        pl__buf_free(&b);
        return pl__err(PL_ENOMEM, "sandbox: out of memory");
    }
    *out = (char *)b.data;
    return PL_OK;
}

/* The error for an openat2() that failed with @p e. */
static int beneath_errno(const pl_sandbox *sb, const char *path, size_t len,
                         int e, bool nofollow)
{
    int n = (int)len;
    switch (e) {
    case EXDEV:
        return pl__err(PL_EFORBIDDEN,
                       "sandbox: path '%.*s' leaves '%s' (through '..', an "
                       "absolute symlink, or a symlink that points outside)",
                       n, path, sb->root);
    case ELOOP:
        if (nofollow)
            return pl__err(PL_EFORBIDDEN,
                           "sandbox: path '%.*s' ends in a symlink and "
                           "O_NOFOLLOW was asked",
                           n, path);
        return pl__err(PL_ELIMIT, "sandbox: path '%.*s': too many symlinks", n,
                       path);
    case ENOENT:
        return pl__err(PL_ENOTFOUND, "sandbox: path '%.*s' not found", n, path);
    case ENOTDIR:
        return pl__err(PL_ENOTFOUND,
                       "sandbox: path '%.*s': a component on the way is not "
                       "a directory",
                       n, path);
    case ENAMETOOLONG:
        return pl__err(PL_ELIMIT, "sandbox: path '%.*s' is too long", n, path);
    default:
        return pl__err(PL_EIO, "sandbox: cannot open '%.*s': %s", n, path,
                       strerror(e));
    }
}

int pl_sandbox_open_file(int *out_fd, const pl_sandbox *sb, const char *path,
                         size_t len, int flags, unsigned mode)
{
    if (out_fd)
        *out_fd = -1;
    if (!out_fd || !sb)
        return pl__err(PL_EINVAL, "pl_sandbox_open_file: NULL %s",
                       !out_fd ? "out_fd" : "sandbox");
    int st = pl__sb_check_path_bytes(path, len);
    if (st)
        return st;
    const char *rel;
    size_t rel_len;
    st = pl__sb_relative_part(&rel, &rel_len, sb, path, len);
    if (st)
        return st;
    bool nofollow = (flags & O_NOFOLLOW) != 0;
    if (!sb->walk_only) {
        char buf[SB_PATH_MAX + 2];
        if (rel_len == 0) {
            buf[0] = '.';
            buf[1] = '\0';
        } else {
            memcpy(buf, rel, rel_len);
            buf[rel_len] = '\0';
        }
        int fd = pl__openat_beneath(sb->dirfd, buf, flags | O_CLOEXEC, mode);
        if (fd >= 0) {
            *out_fd = fd;
            return PL_OK;
        }
        /* No openat2 here (ENOSYS), or a seccomp filter that refuses
         * syscalls it does not know with EPERM: walk instead, which is as
         * strict. */
        if (fd != -ENOSYS && fd != -EPERM)
            return beneath_errno(sb, path, len, -fd, nofollow);
    }
    sb_walk w;
    char last[SB_NAME_MAX + 1] = "";
    int fd = -1;
    st = pl__sb_walk_init(&w, sb, path, len, rel, rel_len);
    if (!st)
        st = pl__sb_walk_run(&w, flags & ~O_NOFOLLOW, mode, nofollow, &fd,
                             last);
    pl__sb_walk_free(&w);
    if (st) {
        if (fd >= 0)
            close(fd);
        return st;
    }
    *out_fd = fd;
    return PL_OK;
}
