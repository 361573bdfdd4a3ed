/*
 * sandbox.c -- paths confined to a working directory, commands to an
 * allowlist (the rules are in policyledger.h, "Sandbox").
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
 *             component at a time, each opened with O_NOFOLLOW relative to
 *             the directory before it, a symlink read with readlinkat() and
 *             its target walked in its place by the same rules.  The walk
 *             keeps its own stack of directory descriptors, so ".." pops
 *             one (never the kernel's "..", which a moved directory could
 *             turn into an escape) and cannot pop the root.
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
#include "policyledger.h"
#include "util.h"

#define SB_PATH_MAX 4095  /* bytes in a path, without its NUL */
#define SB_NAME_MAX 255   /* bytes in one component */
#define SB_MAX_LINKS 40   /* symlinks followed per path, as the kernel's */
#define SB_MAX_DEPTH 2048 /* directories deep (a 4095-byte path has fewer) */

struct pl_sandbox {
    int dirfd;  /* the root, O_PATH | O_DIRECTORY */
    char *root; /* its canonical absolute path */
    size_t root_len;
    char **commands; /* allowed program names */
    size_t n_commands;
    bool *paths; /* commands[i]'s operands are paths under the root */
    bool walk_only;
};

/* ---- checks on strings --------------------------------------------------- */

static bool is_ctl(unsigned char c) { return c < 0x20 || c == 0x7f; }

/* Check a path's bytes: 1..SB_PATH_MAX, no NUL, no control byte. */
static int check_path_bytes(const char *path, size_t len)
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
        if (is_ctl(c))
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
        if (*p == '/' || is_ctl((unsigned char)*p))
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
static int relative_part(const char **rel, size_t *rel_len,
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

/* ---- the walk ------------------------------------------------------------ */

/*
 * The state of one walk: a stack of open directories from the root down
 * (fds[0] is a duplicate of the root's), their names (for the resolved
 * path), and the path still to walk in a buffer of its own, since a
 * symlink's target replaces the component that named it.
 */
typedef struct walk {
    const pl_sandbox *sb;
    const char *orig; /* the caller's path, for messages */
    int orig_len;
    int *fds;
    char **names;
    size_t depth, cap; /* fds[0..depth] are open */
    char rest[SB_PATH_MAX + 1];
    size_t rest_len;
    unsigned links;
    bool made; /* a check of a command's argument: a missing directory on
                  the way is one the program may make (skip_made()) */
} walk;

static void walk_free(walk *w)
{
    for (size_t i = 0; i <= w->depth && w->fds; i++)
        if (w->fds[i] >= 0)
            close(w->fds[i]);
    for (size_t i = 1; i <= w->depth && w->names; i++)
        free(w->names[i]);
    free(w->fds);
    free(w->names);
}

static int walk_init(walk *w, const pl_sandbox *sb, const char *orig,
                     size_t orig_len, const char *rel, size_t rel_len)
{
    memset(w, 0, sizeof *w);
    w->sb = sb;
    w->orig = orig;
    w->orig_len = (int)orig_len;
    w->cap = 16;
    w->fds = malloc(w->cap * sizeof *w->fds);
    w->names = calloc(w->cap, sizeof *w->names);
    if (w->fds)
        w->fds[0] = -1;
    if (!w->fds || !w->names)
        return pl__err(PL_ENOMEM, "sandbox: out of memory");
    w->fds[0] = fcntl(sb->dirfd, F_DUPFD_CLOEXEC, 0);
    if (w->fds[0] < 0)
        return pl__err(PL_EIO, "sandbox: cannot duplicate the root: %s",
                       strerror(errno));
    memcpy(w->rest, rel, rel_len);
    w->rest[rel_len] = '\0';
    w->rest_len = rel_len;
    return PL_OK;
}

/* Take the next component off w->rest into @p name (NUL-terminated).
 * Returns false when none is left.  *last is set when it is the final one
 * (only slashes may follow). */
static int next_component(walk *w, char name[SB_NAME_MAX + 1], bool *got,
                          bool *last)
{
    size_t i = 0;
    while (i < w->rest_len && w->rest[i] == '/')
        i++;
    size_t start = i;
    while (i < w->rest_len && w->rest[i] != '/')
        i++;
    size_t n = i - start;
    *got = n > 0;
    if (n > SB_NAME_MAX)
        return pl__err(PL_ELIMIT,
                       "sandbox: path '%.*s': a component of %zu bytes is "
                       "longer than %d",
                       w->orig_len, w->orig, n, SB_NAME_MAX);
    memcpy(name, w->rest + start, n);
    name[n] = '\0';
    size_t j = i;
    while (j < w->rest_len && w->rest[j] == '/')
        j++;
    *last = j == w->rest_len;
    memmove(w->rest, w->rest + i, w->rest_len - i + 1);
    w->rest_len -= i;
    return PL_OK;
}

static int walk_push(walk *w, int fd, const char *name)
{
    if (w->depth + 1 >= SB_MAX_DEPTH) {
        close(fd);
        return pl__err(PL_ELIMIT, "sandbox: path '%.*s' is too deep",
                       w->orig_len, w->orig);
    }
    if (w->depth + 1 >= w->cap) {
        size_t cap = w->cap * 2;
        int *fds = realloc(w->fds, cap * sizeof *fds);
        if (fds)
            w->fds = fds;
        char **names = fds ? realloc(w->names, cap * sizeof *names) : NULL;
        if (!names) {
            close(fd);
            return pl__err(PL_ENOMEM, "sandbox: out of memory");
        }
        w->names = names;
        w->cap = cap;
    }
    char *copy = pl__strdup(name);
    if (!copy) {
        close(fd);
        return pl__err(PL_ENOMEM, "sandbox: out of memory");
    }
    w->depth++;
    w->fds[w->depth] = fd;
    w->names[w->depth] = copy;
    return PL_OK;
}

/*
 * The component @p name (in the directory on top of the stack) is a
 * symlink: read it and put its target in front of what is left to walk.
 */
static int follow_link(walk *w, const char *name)
{
    if (++w->links > SB_MAX_LINKS)
        return pl__err(PL_ELIMIT, "sandbox: path '%.*s': more than %d symlinks",
                       w->orig_len, w->orig, SB_MAX_LINKS);
    char target[SB_PATH_MAX + 1];
    ssize_t n = readlinkat(w->fds[w->depth], name, target, sizeof target - 1);
    if (n < 0)
        return pl__err(errno == ENOENT ? PL_ENOTFOUND : PL_EIO,
                       "sandbox: path '%.*s': cannot read symlink '%s': %s",
                       w->orig_len, w->orig, name, strerror(errno));
    if (n == 0 || (size_t)n >= sizeof target - 1)
        return pl__err(PL_ELIMIT,
                       "sandbox: path '%.*s': symlink '%s' has an empty or "
                       "over-long target",
                       w->orig_len, w->orig, name);
    target[n] = '\0';
    if (target[0] == '/')
        return pl__err(PL_EFORBIDDEN,
                       "sandbox: path '%.*s': symlink '%s' points to the "
                       "absolute path '%s'; only relative symlinks that stay "
                       "inside are followed",
                       w->orig_len, w->orig, name, target);
    for (ssize_t i = 0; i < n; i++)
        if (is_ctl((unsigned char)target[i]))
            return pl__err(PL_EFORBIDDEN,
                           "sandbox: path '%.*s': symlink '%s' has a control "
                           "byte in its target",
                           w->orig_len, w->orig, name);
    size_t sep = w->rest_len ? 1 : 0; /* rest starts with '/' if not empty */
    size_t need = (size_t)n + sep + w->rest_len;
    if (need > SB_PATH_MAX)
        return pl__err(PL_ELIMIT,
                       "sandbox: path '%.*s': longer than %d bytes once "
                       "symlink '%s' is expanded",
                       w->orig_len, w->orig, SB_PATH_MAX, name);
    memmove(w->rest + n + sep, w->rest, w->rest_len + 1);
    memcpy(w->rest, target, (size_t)n);
    if (sep)
        w->rest[n] = '/';
    w->rest_len = need;
    return PL_OK;
}

/* The error for an openat() of @p name that failed with @p e. */
static int walk_errno(const walk *w, const char *name, int e)
{
    if (e == ENOENT)
        return pl__err(PL_ENOTFOUND, "sandbox: path '%.*s': '%s' not found",
                       w->orig_len, w->orig, name);
    if (e == ENOTDIR)
        return pl__err(PL_ENOTFOUND,
                       "sandbox: path '%.*s': a component before '%s' is not a "
                       "directory",
                       w->orig_len, w->orig, name);
    if (e == ENAMETOOLONG)
        return pl__err(PL_ELIMIT, "sandbox: path '%.*s': '%s' is too long",
                       w->orig_len, w->orig, name);
    return pl__err(PL_EIO, "sandbox: path '%.*s': cannot open '%s': %s",
                   w->orig_len, w->orig, name, strerror(e));
}

static int not_a_dir(const walk *w, const char *name)
{
    return pl__err(PL_ENOTFOUND,
                   "sandbox: path '%.*s': '%s' is not a directory", w->orig_len,
                   w->orig, name);
}

/*
 * The directory named before w->rest is missing, and a program may make
 * it: walk over w->rest while it stays in what would be made (no symlink
 * there), back to the directory on top of the stack.  *out_inside when
 * the path ends in it.
 */
static int skip_made(walk *w, bool *out_inside)
{
    char name[SB_NAME_MAX + 1];
    size_t made = 1;
    for (;;) {
        bool got = false, last = false;
        int st = next_component(w, name, &got, &last);
        if (st || !got) {
            *out_inside = true;
            return st;
        }
        if (strcmp(name, "..") == 0 && --made == 0) {
            *out_inside = false;
            return PL_OK;
        }
        if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0)
            made++;
    }
}

/*
 * Walk the path.  With @p open_flags < 0 (a resolve), the last component is
 * looked at with O_PATH and may be missing; *out_fd is then -1 and
 * *last_name holds it.  Otherwise the last component is opened with
 * open_flags | O_NOFOLLOW, a symlink there followed unless @p nofollow,
 * and *out_fd is the result.
 */
static int walk_run(walk *w, int open_flags, unsigned mode, bool nofollow,
                    int *out_fd, char last_name[SB_NAME_MAX + 1])
{
    char name[SB_NAME_MAX + 1];
    *out_fd = -1;
    last_name[0] = '\0';
    for (;;) {
        bool got = false, last = false;
        int st = next_component(w, name, &got, &last);
        if (st)
            return st;
        if (!got) { /* nothing left: the path names a directory we hold */
            if (open_flags < 0)
                return PL_OK;
            int fd = openat(w->fds[w->depth], ".",
                            (open_flags | O_CLOEXEC) & ~O_CREAT, mode);
            if (fd < 0)
                return walk_errno(w, ".", errno);
            *out_fd = fd;
            return PL_OK;
        }
        if (strcmp(name, ".") == 0)
            continue;
        if (strcmp(name, "..") == 0) {
            if (w->depth == 0)
                return pl__err(PL_EFORBIDDEN,
                               "sandbox: path '%.*s' climbs above '%s' with "
                               "'..'",
                               w->orig_len, w->orig, w->sb->root);
            close(w->fds[w->depth]);
            free(w->names[w->depth]);
            w->depth--;
            continue;
        }
        int dir = w->fds[w->depth];
        /* "name/" names a directory, as open(2) reads it */
        bool dir_only = last && w->rest_len > 0;
        if (last && open_flags >= 0) {
            if (dir_only && (open_flags & O_CREAT))
                return walk_errno(w, name, EISDIR);
            int fd = openat(dir, name,
                            open_flags | O_NOFOLLOW | O_CLOEXEC |
                                (dir_only ? O_DIRECTORY : 0),
                            mode);
            if (fd >= 0) {
                *out_fd = fd;
                snprintf(last_name, SB_NAME_MAX + 1, "%s", name);
                return PL_OK;
            }
            int e = errno;
            struct stat lst;
            if ((e == ELOOP || e == EMLINK || e == ENOTDIR || e == EEXIST) &&
                fstatat(dir, name, &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISLNK(lst.st_mode)) {
                if (nofollow || (open_flags & O_EXCL))
                    return pl__err(PL_EFORBIDDEN,
                                   "sandbox: path '%.*s': '%s' is a symlink "
                                   "and O_NOFOLLOW or O_EXCL was asked",
                                   w->orig_len, w->orig, name);
                st = follow_link(w, name);
                if (st)
                    return st;
                continue;
            }
            if (dir_only && e == ENOTDIR)
                return not_a_dir(w, name);
            return walk_errno(w, name, e);
        }
        int fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == ENOENT && last) { /* a resolve: the last may be new */
                snprintf(last_name, SB_NAME_MAX + 1, "%s", name);
                return PL_OK;
            }
            bool inside = false;
            if (e == ENOENT && w->made) {
                if ((st = skip_made(w, &inside)) || inside)
                    return st;
                continue;
            }
            return walk_errno(w, name, e);
        }
        struct stat sst;
        if (fstat(fd, &sst) != 0) {
            int e = errno;
            close(fd);
            return walk_errno(w, name, e);
        }
        if (S_ISLNK(sst.st_mode)) {
            close(fd);
            st = follow_link(w, name);
            if (st)
                return st;
            continue;
        }
        if (last && (!dir_only || S_ISDIR(sst.st_mode))) {
            close(fd); /* a resolve, and the last exists */
            snprintf(last_name, SB_NAME_MAX + 1, "%s", name);
            return PL_OK;
        }
        if (!S_ISDIR(sst.st_mode)) {
            close(fd);
            return not_a_dir(w, name);
        }
        st = walk_push(w, fd, name);
        if (st)
            return st;
    }
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
    int st = check_path_bytes(path, len);
    if (st)
        return st;
    const char *rel;
    size_t rel_len;
    st = relative_part(&rel, &rel_len, sb, path, len);
    if (st)
        return st;
    walk w;
    int fd = -1;
    char last[SB_NAME_MAX + 1] = "";
    pl__buf b = {0};
    st = walk_init(&w, sb, path, len, rel, rel_len);
    if (!st)
        st = walk_run(&w, -1, 0, false, &fd, last);
    if (st) {
        walk_free(&w);
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
    walk_free(&w);
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
    int st = check_path_bytes(path, len);
    if (st)
        return st;
    const char *rel;
    size_t rel_len;
    st = relative_part(&rel, &rel_len, sb, path, len);
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
    walk w;
    char last[SB_NAME_MAX + 1] = "";
    int fd = -1;
    st = walk_init(&w, sb, path, len, rel, rel_len);
    if (!st)
        st = walk_run(&w, flags & ~O_NOFOLLOW, mode, nofollow, &fd, last);
    walk_free(&w);
    if (st) {
        if (fd >= 0)
            close(fd);
        return st;
    }
    *out_fd = fd;
    return PL_OK;
}

/* ---- commands ------------------------------------------------------------ */

/*
 * Does @p rel (a path relative to the root) climb above the root, read as
 * written (before any symlink)?  "a/../../x" does, even when "a" does not
 * exist yet: a program may make it.
 */
static bool climbs_out(const char *rel, size_t len)
{
    long depth = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && rel[j] != '/')
            j++;
        size_t n = j - i;
        if (n == 2 && rel[i] == '.' && rel[i + 1] == '.') {
            if (--depth < 0)
                return true;
        } else if (n && !(n == 1 && rel[i] == '.')) {
            depth++;
        }
        i = j + 1;
    }
    return false;
}

/* Check one path argument @p arg (argument @p i), relative to @p cwd (a
 * resolved directory under the root, or NULL for the root). */
static int check_path_arg(const pl_sandbox *sb, const char *cwd, size_t i,
                          const char *arg)
{
    char joined[SB_PATH_MAX + 1];
    const char *path = arg;
    if (arg[0] != '/' && cwd && strcmp(cwd, ".") != 0) {
        int n = snprintf(joined, sizeof joined, "%s/%s", cwd, arg);
        if (n < 0 || (size_t)n >= sizeof joined)
            return pl__err(PL_ELIMIT,
                           "sandbox: argument %zu, '%.200s', makes a path "
                           "longer than %d bytes",
                           i, arg, SB_PATH_MAX);
        path = joined;
    }
    size_t len = strlen(path);
    const char *rel;
    size_t rel_len;
    int st = check_path_bytes(path, len);
    if (!st)
        st = relative_part(&rel, &rel_len, sb, path, len);
    if (!st && climbs_out(rel, rel_len))
        st = pl__err(PL_EFORBIDDEN,
                     "sandbox: argument %zu, '%.200s', climbs above '%s' "
                     "with '..'",
                     i, arg, sb->root);
    if (!st) {
        /* symlinks on the way, also past missing directories the program
         * may make ("x/../out" once x is made); a missing part is the
         * program's to meet */
        walk w;
        int fd = -1;
        char last[SB_NAME_MAX + 1];
        st = walk_init(&w, sb, path, len, rel, rel_len);
        w.made = true;
        if (!st)
            st = walk_run(&w, -1, 0, false, &fd, last);
        walk_free(&w);
        if (st == PL_ENOTFOUND)
            st = PL_OK;
    }
    if (st == PL_EFORBIDDEN)
        return pl__err(PL_EFORBIDDEN,
                       "sandbox: argument %zu is a path outside the sandbox: "
                       "%s",
                       i, pl_errmsg());
    return st;
}

/* Option argument @p i, @p a, may hold a name: a short option's attached
 * value ("-tout": "out", or "ut"...: none can tell), or the whole of it
 * (the value of the option before it, "-t" "-o").  None may be a symlink
 * that leaves; a missing name or one too long for an entry is left. */
static int check_attached(const pl_sandbox *sb, const char *cwd, size_t i,
                          const char *a)
{
    size_t len = strlen(a);
    bool is_short = a[1] != '-';
    for (size_t k = 0; k < len; k++) {
        const char *name = a + k;
        if ((k > 0 && (!is_short || k < 2)) || len - k > SB_NAME_MAX ||
            strchr(name, '/'))
            continue;
        int st = check_path_arg(sb, cwd, i, name);
        if (st == PL_EFORBIDDEN)
            return pl__err(PL_EFORBIDDEN,
                           "sandbox: argument %zu, '%.200s', names '%s' in "
                           "it, a symlink that leaves '%s'; give a path as "
                           "an argument of its own",
                           i, a, name, sb->root);
        if (st == PL_ENOMEM)
            return st;
    }
    return PL_OK;
}

/* Check the path arguments of a command whose operands are paths: every
 * argument not starting with '-' ("-" alone is standard input), all after
 * "--", and the value of "--name=value"; a short option with a '/' or a
 * ".." in its attached value ("-f/etc/x", "-C..") cannot be told apart,
 * so is refused, and so is an option that names a symlink that leaves in
 * it (check_attached()). */
static int check_path_args(const pl_sandbox *sb, const char *cwd,
                           const char *const *argv, size_t argc)
{
    bool operands = false;
    for (size_t i = 1; i < argc; i++) {
        const char *a = argv[i];
        int st = PL_OK;
        if (operands || a[0] != '-') {
            st = *a ? check_path_arg(sb, cwd, i, a) : PL_OK;
        } else if (strcmp(a, "--") == 0) {
            operands = true;
        } else if (strcmp(a, "-") == 0) {
            continue;
        } else if (a[1] == '-') {
            const char *eq = strchr(a, '=');
            if (eq && eq[1])
                st = check_path_arg(sb, cwd, i, eq + 1);
        } else if (strchr(a, '/') || strstr(a, "..")) {
            st = pl__err(PL_EFORBIDDEN,
                         "sandbox: argument %zu, '%.200s', is an option with "
                         "a path attached; give the path as an argument of "
                         "its own",
                         i, a);
        }
        if (!st && !operands && a[0] == '-')
            st = check_attached(sb, cwd, i, a);
        if (st)
            return st;
    }
    return PL_OK;
}

int pl_sandbox_check_command_in(const pl_sandbox *sb, const char *cwd,
                                const char *const *argv, size_t argc)
{
    if (!sb || !argv)
        return pl__err(PL_EINVAL, "pl_sandbox_check_command: NULL %s",
                       !sb ? "sandbox" : "argv");
    if (argc == 0)
        return pl__err(PL_EINVAL, "sandbox: empty command");
    for (size_t i = 0; i < argc; i++) {
        if (!argv[i])
            return pl__err(PL_EINVAL, "sandbox: command argument %zu is NULL",
                           i);
        for (const char *p = argv[i]; *p; p++)
            if (is_ctl((unsigned char)*p))
                return pl__err(PL_EINVAL,
                               "sandbox: command argument %zu holds the "
                               "control byte 0x%02x",
                               i, (unsigned)(unsigned char)*p);
    }
    const char *prog = argv[0];
    if (!*prog)
        return pl__err(PL_EINVAL, "sandbox: empty program name");
    if (strchr(prog, '/'))
        return pl__err(PL_EFORBIDDEN,
                       "sandbox: program '%s' is a path; name an allowed "
                       "program instead",
                       prog);
    for (size_t i = 0; i < sb->n_commands; i++)
        if (strcmp(prog, sb->commands[i]) == 0)
            return sb->paths[i] ? check_path_args(sb, cwd, argv, argc) : PL_OK;
    return pl__err(PL_EFORBIDDEN,
                   "sandbox: program '%s' is not allowed (%zu allowed)", prog,
                   sb->n_commands);
}

int pl_sandbox_check_command(const pl_sandbox *sb, const char *const *argv,
                             size_t argc)
{
    return pl_sandbox_check_command_in(sb, NULL, argv, argc);
}
