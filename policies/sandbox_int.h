/*
 * sandbox_int.h -- what the sandbox's files share (the rules are in
 * policyledger.h, "Sandbox"): sandbox.c makes the sandbox, resolves and
 * opens paths in it; sandbox_walk.c is the walk, one component at a time;
 * sandbox_cmd.c checks commands against the allowlist.
 */
#ifndef PL_SANDBOX_INT_H
#define PL_SANDBOX_INT_H

#include <stdbool.h>
#include <stddef.h>

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

static inline bool pl__sb_is_ctl(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

/* Check a path's bytes: 1..SB_PATH_MAX, no NUL, no control byte. */
PL__HIDDEN int pl__sb_check_path_bytes(const char *path, size_t len);

/* The caller's path relative to the root: an absolute one must be the
 * root or below it.  *rel is the part after the root (empty: the root
 * itself). */
PL__HIDDEN int pl__sb_relative_part(const char **rel, size_t *rel_len,
                                    const pl_sandbox *sb, const char *path,
                                    size_t len);

/*
 * The state of one walk: a stack of open directories from the root down
 * (fds[0] is a duplicate of the root's), their names (for the resolved
 * path), and the path still to walk in a buffer of its own, since a
 * symlink's target replaces the component that named it.
 */
typedef struct sb_walk {
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
} sb_walk;

/* Start a walk of @p rel (@p orig, the caller's path, for messages);
 * pl__sb_walk_free() it whatever this returns. */
PL__HIDDEN int pl__sb_walk_init(sb_walk *w, const pl_sandbox *sb,
                                const char *orig, size_t orig_len,
                                const char *rel, size_t rel_len);
PL__HIDDEN void pl__sb_walk_free(sb_walk *w);
/* Walk the path: with @p open_flags < 0 a resolve (the last component
 * looked at, and may be missing: *out_fd -1, its name in @p last_name);
 * else the last component opened (see sandbox_walk.c). */
PL__HIDDEN int pl__sb_walk_run(sb_walk *w, int open_flags, unsigned mode,
                               bool nofollow, int *out_fd,
                               char last_name[SB_NAME_MAX + 1]);

#endif /* PL_SANDBOX_INT_H */
