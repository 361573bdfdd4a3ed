/*
 * sandbox_walk.c -- the sandbox's own walk of a path (sandbox.c says when
 * it is taken): one component at a time, each opened with O_NOFOLLOW
 * relative to the directory before it, a symlink read with readlinkat()
 * and its target walked in its place by the same rules.  The walk keeps
 * its own stack of directory descriptors, so ".." pops one (never the
 * kernel's "..", which a moved directory could turn into an escape) and
 * cannot pop the root.
 */
#define _GNU_SOURCE /* O_PATH */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox_int.h"

void pl__sb_walk_free(sb_walk *w)
{
    for (size_t i = 0; i <= w->depth && w->fds; i++)
        if (w->fds[i] >= 0)
            close(w->fds[i]);
    for (size_t i = 1; i <= w->depth && w->names; i++)
        free(w->names[i]);
    free(w->fds);
    free(w->names);
}

int pl__sb_walk_init(sb_walk *w, const pl_sandbox *sb, const char *orig,
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
static int next_component(sb_walk *w, char name[SB_NAME_MAX + 1], bool *got,
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

static int walk_push(sb_walk *w, int fd, const char *name)
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
static int follow_link(sb_walk *w, const char *name)
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
        if (pl__sb_is_ctl((unsigned char)target[i]))
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
static int walk_errno(const sb_walk *w, const char *name, int e)
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

static int not_a_dir(const sb_walk *w, const char *name)
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
static int skip_made(sb_walk *w, bool *out_inside)
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
int pl__sb_walk_run(sb_walk *w, int open_flags, unsigned mode, bool nofollow,
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
