/*
 * sandbox_cmd.c -- commands checked against the sandbox's allowlist, and
 * the path operands of those whose operands are paths checked to stay
 * under its root (the rules are in policyledger.h, "Sandbox").
 */
#include <stdio.h>
#include <string.h>

#include "sandbox_int.h"

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
    int st = pl__sb_check_path_bytes(path, len);
    if (!st)
        st = pl__sb_relative_part(&rel, &rel_len, sb, path, len);
    if (!st && climbs_out(rel, rel_len))
        st = pl__err(PL_EFORBIDDEN,
                     "sandbox: argument %zu, '%.200s', climbs above '%s' "
                     "with '..'",
                     i, arg, sb->root);
    if (!st) {
        /* symlinks on the way, also past missing directories the program
         * may make ("x/../out" once x is made); a missing part is the
         * program's to meet */
        sb_walk w;
        int fd = -1;
        char last[SB_NAME_MAX + 1];
        st = pl__sb_walk_init(&w, sb, path, len, rel, rel_len);
        w.made = true;
        if (!st)
            st = pl__sb_walk_run(&w, -1, 0, false, &fd, last);
        pl__sb_walk_free(&w);
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
            if (pl__sb_is_ctl((unsigned char)*p))
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
