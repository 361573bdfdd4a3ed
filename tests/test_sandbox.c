/*
 * test_sandbox.c -- pl_sandbox (policies/sandbox.c): every way out of the
 * directory is refused, with real files and symlinks in a temporary
 * directory.  Each path test runs twice: with openat2(2) where the kernel
 * has it, and with the component walk (walk_only), which is what runs
 * where it does not; two more take openat2 away with a seccomp filter
 * (ENOSYS, EPERM) and check that the open falls back to the walk.
 *
 * Layout made by setup():
 *   D/box/               the sandbox
 *   D/box/a/b.txt        "inside"
 *   D/box/sub/f.txt      "sub file"
 *   D/outside/secret     "secret"
 *   D/box-evil/x         a sibling whose name begins with the box's
 */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char D[4096], BOX[4200];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot create %s", path);
    fputs(text, f);
    fclose(f);
}

static void mkdir_p(const char *path)
{
    cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
}

static void setup(void)
{
    snprintf(D, sizeof D, "%s", t_tmpdir());
    char p[4400];
    snprintf(BOX, sizeof BOX, "%s/box", D);
    mkdir_p(BOX);
    snprintf(p, sizeof p, "%s/a", BOX);
    mkdir_p(p);
    snprintf(p, sizeof p, "%s/a/b.txt", BOX);
    write_file(p, "inside");
    snprintf(p, sizeof p, "%s/sub", BOX);
    mkdir_p(p);
    snprintf(p, sizeof p, "%s/sub/f.txt", BOX);
    write_file(p, "sub file");
    snprintf(p, sizeof p, "%s/outside", D);
    mkdir_p(p);
    snprintf(p, sizeof p, "%s/outside/secret", D);
    write_file(p, "secret");
    snprintf(p, sizeof p, "%s/box-evil", D);
    mkdir_p(p);
    snprintf(p, sizeof p, "%s/box-evil/x", D);
    write_file(p, "evil");
}

/* A symlink at BOX/@p name pointing to @p target. */
static void link_in_box(const char *target, const char *name)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", BOX, name);
    cr_assert(symlink(target, p) == 0, "symlink %s -> %s: %s", p, target,
              strerror(errno));
}

static pl_sandbox *box(bool walk_only)
{
    pl_sandbox_options o = PL_SANDBOX_OPTIONS_INIT;
    o.walk_only = walk_only;
    pl_sandbox *sb = NULL;
    int st = pl_sandbox_new(&sb, BOX, &o);
    cr_assert_eq(st, PL_OK, "%s", pl_errmsg());
    return sb;
}

static void expect_has(const char *hay, const char *needle)
{
    cr_expect(hay && strstr(hay, needle) != NULL, "expected \"%s\" in: %s",
              needle, hay ? hay : "(null)");
}

/* resolve @p path: expect @p want and, on success, @p rel. */
static void expect_resolve(const pl_sandbox *sb, const char *path, int want,
                           const char *rel_or_msg)
{
    char *out = NULL;
    int st = pl_sandbox_resolve(&out, sb, path, strlen(path));
    cr_expect_eq(st, want, "resolve '%s': %s, expected %s (%s)", path,
                 pl_status_name(st), pl_status_name(want), pl_errmsg());
    if (st == PL_OK && want == PL_OK)
        cr_expect_str_eq(out, rel_or_msg, "resolve '%s'", path);
    else if (st)
        expect_has(pl_errmsg(), rel_or_msg);
    free(out);
}

/* open @p path read-only (without O_CLOEXEC, which the open adds): expect
 * @p want and, on success, @p content. */
static void expect_open(const pl_sandbox *sb, const char *path, int want,
                        const char *content_or_msg)
{
    int fd = -1;
    int st = pl_sandbox_open_file(&fd, sb, path, strlen(path), O_RDONLY, 0);
    cr_expect_eq(st, want, "open '%s': %s, expected %s (%s)", path,
                 pl_status_name(st), pl_status_name(want), pl_errmsg());
    if (st == PL_OK) {
        cr_expect(fcntl(fd, F_GETFD) & FD_CLOEXEC, "'%s': no O_CLOEXEC", path);
        char buf[256] = {0};
        ssize_t n = read(fd, buf, sizeof buf - 1);
        cr_expect(n >= 0);
        if (want == PL_OK)
            cr_expect_str_eq(buf, content_or_msg, "content of '%s'", path);
        close(fd);
    } else {
        cr_expect_eq(fd, -1);
        expect_has(pl_errmsg(), content_or_msg);
    }
}

#define BOTH_MODES for (int walk = 0; walk < 2; walk++)

/* ------------------------------------------------------------------------ */

Test(sandbox, paths_inside_resolve_and_open)
{
    setup();
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        char abs[4400];
        snprintf(abs, sizeof abs, "%s/a/b.txt", pl_sandbox_root(sb));
        expect_resolve(sb, "a/b.txt", PL_OK, "a/b.txt");
        expect_resolve(sb, "./a//./b.txt", PL_OK, "a/b.txt");
        expect_resolve(sb, "sub/../a/b.txt", PL_OK, "a/b.txt");
        expect_resolve(sb, abs, PL_OK, "a/b.txt");
        expect_resolve(sb, pl_sandbox_root(sb), PL_OK, ".");
        expect_resolve(sb, ".", PL_OK, ".");
        expect_resolve(sb, "a/new.txt", PL_OK, "a/new.txt"); /* may be new */
        expect_open(sb, "a/b.txt", PL_OK, "inside");
        expect_open(sb, abs, PL_OK, "inside");
        expect_open(sb, "sub/../a/./b.txt", PL_OK, "inside");
        expect_open(sb, "a/missing", PL_ENOTFOUND, "missing");
        pl_sandbox_free(sb);
    }
}

Test(sandbox, dotdot_escape_refused)
{
    setup();
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        expect_resolve(sb, "../outside/secret", PL_EFORBIDDEN,
                       "../outside/secret");
        expect_resolve(sb, "a/../../outside/secret", PL_EFORBIDDEN, "..");
        expect_resolve(sb, "..", PL_EFORBIDDEN, "..");
        expect_open(sb, "../outside/secret", PL_EFORBIDDEN,
                    "../outside/secret");
        expect_open(sb, "a/../../outside/secret", PL_EFORBIDDEN, "outside");
        expect_open(sb, "sub/../..", PL_EFORBIDDEN, "sub/../..");
        pl_sandbox_free(sb);
    }
}

Test(sandbox, absolute_path_outside_refused)
{
    setup();
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        char p[4400];
        snprintf(p, sizeof p, "%s/outside/secret", D);
        expect_resolve(sb, p, PL_EFORBIDDEN, "outside");
        expect_open(sb, p, PL_EFORBIDDEN, "is outside");
        expect_open(sb, "/etc/passwd", PL_EFORBIDDEN, "/etc/passwd");
        /* A sibling whose name starts with the root's is not inside. */
        snprintf(p, sizeof p, "%s-evil/x", pl_sandbox_root(sb));
        expect_open(sb, p, PL_EFORBIDDEN, "box-evil");
        /* Nor is the root's absolute path with '..' after it. */
        snprintf(p, sizeof p, "%s/../outside/secret", pl_sandbox_root(sb));
        expect_open(sb, p, PL_EFORBIDDEN, "outside");
        pl_sandbox_free(sb);
    }
}

Test(sandbox, symlink_to_outside_refused)
{
    setup();
    char abs_target[4400];
    snprintf(abs_target, sizeof abs_target, "%s/outside/secret", D);
    link_in_box("../outside/secret", "rel_out");
    link_in_box(abs_target, "abs_out");
    link_in_box("../outside", "dir_out");
    link_in_box("a/b.txt", "in_link");
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        expect_resolve(sb, "rel_out", PL_EFORBIDDEN, "rel_out");
        expect_resolve(sb, "abs_out", PL_EFORBIDDEN, "absolute");
        expect_resolve(sb, "dir_out/secret", PL_EFORBIDDEN, "dir_out");
        expect_open(sb, "rel_out", PL_EFORBIDDEN, "rel_out");
        expect_open(sb, "abs_out", PL_EFORBIDDEN, "abs_out");
        expect_open(sb, "dir_out/secret", PL_EFORBIDDEN, "dir_out/secret");
        /* A symlink that stays inside is followed. */
        expect_resolve(sb, "in_link", PL_OK, "a/b.txt");
        expect_open(sb, "in_link", PL_OK, "inside");
        pl_sandbox_free(sb);
    }
}

Test(sandbox, symlink_chains)
{
    setup();
    link_in_box("l2", "l1");
    link_in_box("a/l3", "l2");
    link_in_box("../../outside/secret", "a/l3"); /* from a/: leaves */
    link_in_box("c2", "c1");
    link_in_box("a/c3", "c2");
    link_in_box("b.txt", "a/c3"); /* from a/: a/b.txt */
    link_in_box("loop", "loop");
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        expect_resolve(sb, "l1", PL_EFORBIDDEN, "l1");
        expect_open(sb, "l1", PL_EFORBIDDEN, "l1");
        expect_resolve(sb, "c1", PL_OK, "a/b.txt");
        expect_open(sb, "c1", PL_OK, "inside");
        expect_resolve(sb, "loop", PL_ELIMIT, "symlinks");
        expect_open(sb, "loop", PL_ELIMIT, "symlinks");
        pl_sandbox_free(sb);
    }
}

Test(sandbox, symlink_swapped_in_after_resolve_is_refused_by_open)
{
    setup();
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        /* A directory on the way becomes a symlink out. */
        expect_resolve(sb, "sub/f.txt", PL_OK, "sub/f.txt");
        char p[4400], q[4400];
        snprintf(p, sizeof p, "%s/sub", BOX);
        snprintf(q, sizeof q, "%s/sub.old%d", BOX, walk);
        cr_assert(rename(p, q) == 0);
        link_in_box("../outside", "sub");
        snprintf(p, sizeof p, "%s/outside/f.txt", D);
        write_file(p, "outside file");
        expect_open(sb, "sub/f.txt", PL_EFORBIDDEN, "sub/f.txt");
        /* The last component becomes a symlink out. */
        expect_resolve(sb, "a/b.txt", PL_OK, "a/b.txt");
        snprintf(p, sizeof p, "%s/a/b.txt", BOX);
        cr_assert(unlink(p) == 0);
        link_in_box("../../outside/secret", "a/b.txt");
        expect_open(sb, "a/b.txt", PL_EFORBIDDEN, "a/b.txt");
        /* Put things back for the next mode. */
        cr_assert(unlink(p) == 0);
        write_file(p, "inside");
        snprintf(p, sizeof p, "%s/sub", BOX);
        cr_assert(unlink(p) == 0);
        cr_assert(rename(q, p) == 0);
        pl_sandbox_free(sb);
    }
}

Test(sandbox, nofollow_refuses_a_last_symlink)
{
    setup();
    link_in_box("a/b.txt", "in_link");
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        int fd = -1;
        int st = pl_sandbox_open_file(&fd, sb, "in_link", 7,
                                      O_RDONLY | O_NOFOLLOW, 0);
        cr_expect_eq(st, PL_EFORBIDDEN, "%s", pl_errmsg());
        expect_has(pl_errmsg(), "in_link");
        cr_expect_eq(fd, -1);
        pl_sandbox_free(sb);
    }
}

Test(sandbox, path_through_a_file)
{
    setup();
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        expect_resolve(sb, "a/b.txt/c", PL_ENOTFOUND, "not a directory");
        expect_open(sb, "a/b.txt/c", PL_ENOTFOUND, "not a directory");
        pl_sandbox_free(sb);
    }
}

/* A trailing '/' names a directory: after a file it is refused as the
 * kernel's open(2) refuses it, by the walk as by openat2. */
Test(sandbox, a_file_named_as_a_directory)
{
    setup();
    link_in_box("a/b.txt", "in_link");
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        expect_resolve(sb, "a/b.txt/", PL_ENOTFOUND, "not a directory");
        expect_open(sb, "a/b.txt/", PL_ENOTFOUND, "not a directory");
        expect_open(sb, "a/b.txt//", PL_ENOTFOUND, "not a directory");
        expect_open(sb, "in_link/", PL_ENOTFOUND, "not a directory");
        expect_resolve(sb, "a/", PL_OK, "a");
        pl_sandbox_free(sb);
    }
}

Test(sandbox, long_paths)
{
    setup();
    static char p[8192];
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        /* 4096 bytes: one past the limit. */
        memset(p, 'a', 4096);
        p[4096] = '\0';
        expect_resolve(sb, p, PL_ELIMIT, "4096 bytes");
        expect_open(sb, p, PL_ELIMIT, "4096 bytes");
        /* A component of 256 bytes. */
        memset(p, 'b', 256);
        p[256] = '\0';
        expect_resolve(sb, p, PL_ELIMIT, "256 bytes");
        /* 4095 bytes of "./" and a name: at the limit, and fine. */
        size_t n = 0;
        while (n + 2 <= 4095 - 7)
            p[n++] = '.', p[n++] = '/';
        memcpy(p + n, "a/b.txt", 8);
        cr_assert_leq(strlen(p), 4095);
        expect_resolve(sb, p, PL_OK, "a/b.txt");
        expect_open(sb, p, PL_OK, "inside");
        /* 2047 levels of "a/.." then "..": still refused at the root. */
        n = 0;
        while (n + 5 <= 4090)
            memcpy(p + n, "a/../", 5), n += 5;
        memcpy(p + n, "..", 3);
        expect_resolve(sb, p, PL_EFORBIDDEN, "..");
        expect_open(sb, p, PL_EFORBIDDEN, "sandbox");
        pl_sandbox_free(sb);
    }
}

Test(sandbox, nul_and_control_bytes)
{
    setup();
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        char *out = (char *)1;
        int fd = 7;
        /* "a/b.txt\0x": a NUL inside the counted path. */
        int st = pl_sandbox_resolve(&out, sb, "a/b.txt\0x", 9);
        cr_expect_eq(st, PL_EINVAL);
        cr_expect_null(out);
        expect_has(pl_errmsg(), "NUL byte at offset 7");
        st = pl_sandbox_open_file(&fd, sb, "a/b.txt\0x", 9, O_RDONLY, 0);
        cr_expect_eq(st, PL_EINVAL);
        cr_expect_eq(fd, -1);
        expect_resolve(sb, "a/b\n.txt", PL_EINVAL, "0x0a");
        expect_open(sb, "a\x1b[2J", PL_EINVAL, "0x1b");
        expect_open(sb, "a/\x7f", PL_EINVAL, "0x7f");
        pl_sandbox_free(sb);
    }
}

Test(sandbox, empty_and_null_paths)
{
    setup();
    pl_sandbox *sb = box(false);
    char *out = NULL;
    int fd = -1;
    cr_expect_eq(pl_sandbox_resolve(&out, sb, "", 0), PL_EINVAL);
    expect_has(pl_errmsg(), "empty path");
    cr_expect_eq(pl_sandbox_open_file(&fd, sb, "", 0, O_RDONLY, 0), PL_EINVAL);
    expect_has(pl_errmsg(), "empty path");
    cr_expect_eq(pl_sandbox_resolve(&out, sb, NULL, 0), PL_EINVAL);
    cr_expect_eq(pl_sandbox_resolve(NULL, sb, "a", 1), PL_EINVAL);
    cr_expect_eq(pl_sandbox_resolve(&out, NULL, "a", 1), PL_EINVAL);
    cr_expect_eq(pl_sandbox_open_file(NULL, sb, "a", 1, O_RDONLY, 0),
                 PL_EINVAL);
    pl_sandbox_free(sb);
    pl_sandbox_free(NULL);
}

Test(sandbox, create_inside_never_outside)
{
    setup();
    link_in_box("../outside/created", "dangling_out");
    link_in_box("a/created_via_link", "dangling_in");
    BOTH_MODES
    {
        pl_sandbox *sb = box(walk);
        int fd = -1;
        const char *name = walk ? "a/new1" : "a/new0";
        int st = pl_sandbox_open_file(&fd, sb, name, strlen(name),
                                      O_WRONLY | O_CREAT | O_EXCL, 0644);
        cr_expect_eq(st, PL_OK, "%s", pl_errmsg());
        cr_expect_eq(write(fd, "x", 1), 1);
        close(fd);
        st = pl_sandbox_open_file(&fd, sb, "dangling_out", 12,
                                  O_WRONLY | O_CREAT, 0644);
        cr_expect_eq(st, PL_EFORBIDDEN, "%s", pl_errmsg());
        char p[4400];
        snprintf(p, sizeof p, "%s/outside/created", D);
        cr_expect(access(p, F_OK) != 0, "a file was created outside");
        st = pl_sandbox_open_file(&fd, sb, "a/../../outside/created2", 24,
                                  O_WRONLY | O_CREAT, 0644);
        cr_expect_eq(st, PL_EFORBIDDEN, "%s", pl_errmsg());
        pl_sandbox_free(sb);
    }
    /* A dangling symlink that stays inside is followed to create. */
    pl_sandbox *sb = box(true);
    int fd = -1;
    int st = pl_sandbox_open_file(&fd, sb, "dangling_in", 11,
                                  O_WRONLY | O_CREAT, 0644);
    cr_expect_eq(st, PL_OK, "%s", pl_errmsg());
    close(fd);
    char p[4400];
    snprintf(p, sizeof p, "%s/a/created_via_link", BOX);
    cr_expect(access(p, F_OK) == 0);
    pl_sandbox_free(sb);
}

Test(sandbox, root_held_open_across_a_rename)
{
    setup();
    pl_sandbox *sb = box(false);
    char moved[4400];
    snprintf(moved, sizeof moved, "%s/moved", D);
    cr_assert(rename(BOX, moved) == 0);
    expect_open(sb, "a/b.txt", PL_OK, "inside");
    pl_sandbox_free(sb);
}

Test(sandbox, new_errors)
{
    setup();
    pl_sandbox *sb = (pl_sandbox *)1;
    char p[4400];
    snprintf(p, sizeof p, "%s/nope", D);
    cr_expect_eq(pl_sandbox_new(&sb, p, NULL), PL_ENOTFOUND);
    cr_expect_null(sb);
    expect_has(pl_errmsg(), "nope");
    snprintf(p, sizeof p, "%s/a/b.txt", BOX);
    cr_expect_eq(pl_sandbox_new(&sb, p, NULL), PL_EIO);
    expect_has(pl_errmsg(), "b.txt");
    cr_expect_eq(pl_sandbox_new(NULL, BOX, NULL), PL_EINVAL);
    cr_expect_eq(pl_sandbox_new(&sb, NULL, NULL), PL_EINVAL);
    pl_sandbox_options o = PL_SANDBOX_OPTIONS_INIT;
    o.version = 99;
    cr_expect_eq(pl_sandbox_new(&sb, BOX, &o), PL_EINVAL);
    expect_has(pl_errmsg(), "version");
    const char *bad[] = {"ls", "/bin/ls"};
    o = (pl_sandbox_options)PL_SANDBOX_OPTIONS_INIT;
    o.commands = bad;
    o.n_commands = 2;
    cr_expect_eq(pl_sandbox_new(&sb, BOX, &o), PL_EINVAL);
    expect_has(pl_errmsg(), "command 1");
}

Test(sandbox, commands_against_the_allowlist)
{
    setup();
    const char *allowed[] = {"git", "ls"};
    pl_sandbox_options o = PL_SANDBOX_OPTIONS_INIT;
    o.commands = allowed;
    o.n_commands = 2;
    pl_sandbox *sb = NULL;
    cr_assert_eq(pl_sandbox_new(&sb, BOX, &o), PL_OK, "%s", pl_errmsg());

    const char *ok[] = {"git", "status", "--short", "; rm -rf / #"};
    cr_expect_eq(pl_sandbox_check_command(sb, ok, 4), PL_OK, "%s", pl_errmsg());
    const char *ls[] = {"ls"};
    cr_expect_eq(pl_sandbox_check_command(sb, ls, 1), PL_OK);

    const char *rm[] = {"rm", "-rf", "x"};
    cr_expect_eq(pl_sandbox_check_command(sb, rm, 3), PL_EFORBIDDEN);
    expect_has(pl_errmsg(), "'rm' is not allowed");
    const char *near[] = {"gitx"};
    cr_expect_eq(pl_sandbox_check_command(sb, near, 1), PL_EFORBIDDEN);
    const char *prefix[] = {"gi"};
    cr_expect_eq(pl_sandbox_check_command(sb, prefix, 1), PL_EFORBIDDEN);
    const char *upper[] = {"GIT"};
    cr_expect_eq(pl_sandbox_check_command(sb, upper, 1), PL_EFORBIDDEN);
    const char *path[] = {"/usr/bin/git", "status"};
    cr_expect_eq(pl_sandbox_check_command(sb, path, 2), PL_EFORBIDDEN);
    expect_has(pl_errmsg(), "is a path");
    const char *rel[] = {"./git"};
    cr_expect_eq(pl_sandbox_check_command(sb, rel, 1), PL_EFORBIDDEN);
    const char *shell_line[] = {"git status; rm -rf /"};
    cr_expect_eq(pl_sandbox_check_command(sb, shell_line, 1), PL_EFORBIDDEN);
    const char *ctl[] = {"git", "a\nb"};
    cr_expect_eq(pl_sandbox_check_command(sb, ctl, 2), PL_EINVAL);
    expect_has(pl_errmsg(), "argument 1");
    const char *empty[] = {""};
    cr_expect_eq(pl_sandbox_check_command(sb, empty, 1), PL_EINVAL);
    const char *with_null[] = {"git", NULL};
    cr_expect_eq(pl_sandbox_check_command(sb, with_null, 2), PL_EINVAL);
    cr_expect_eq(pl_sandbox_check_command(sb, ok, 0), PL_EINVAL);
    cr_expect_eq(pl_sandbox_check_command(sb, NULL, 1), PL_EINVAL);
    pl_sandbox_free(sb);

    /* No allowlist: nothing is allowed. */
    cr_assert_eq(pl_sandbox_new(&sb, BOX, NULL), PL_OK);
    cr_expect_eq(pl_sandbox_check_command(sb, ls, 1), PL_EFORBIDDEN);
    pl_sandbox_free(sb);
}

/* ------------------------------------------------------------------------ */
/* Without openat2: a seccomp filter takes it away, as a kernel without it  */
/* or a container's profile would                                           */
/* ------------------------------------------------------------------------ */

/* Make openat2 fail with @p err in this (test) process from now on. */
static void refuse_openat2(int err)
{
#if defined(__x86_64__)
    const unsigned arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
    const unsigned arch = AUDIT_ARCH_AARCH64;
#else
    cr_skip_test("no seccomp filter for this architecture in the test");
#endif
#if defined(__x86_64__) || defined(__aarch64__)
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K,
                 SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    cr_assert(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
    cr_assert(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0,
              "seccomp: %s", strerror(errno));
#endif
}

static void escapes_refused_without_openat2(int err)
{
    setup();
    link_in_box("../outside/secret", "rel_out");
    link_in_box("a/b.txt", "in_link");
    pl_sandbox *sb = box(false);
    refuse_openat2(err);
    expect_open(sb, "a/b.txt", PL_OK, "inside");
    expect_open(sb, "in_link", PL_OK, "inside");
    expect_open(sb, "../outside/secret", PL_EFORBIDDEN, "..");
    expect_open(sb, "rel_out", PL_EFORBIDDEN, "rel_out");
    expect_open(sb, "a/b.txt/c", PL_ENOTFOUND, "not a directory");
    /* The walk's own message, not openat2's: it did the work. */
    expect_open(sb, "sub/../..", PL_EFORBIDDEN, "climbs above");
    pl_sandbox_free(sb);
}

Test(sandbox, walks_where_openat2_is_missing)
{
    escapes_refused_without_openat2(ENOSYS);
}

Test(sandbox, walks_where_seccomp_refuses_openat2)
{
    escapes_refused_without_openat2(EPERM);
}
