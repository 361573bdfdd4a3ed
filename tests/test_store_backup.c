/*
 * test_store_backup.c -- the guide's "Backing up a live store" (Operations),
 * as written: `mdb_copy` (Debian's lmdb-utils) copies a store in use, a file
 * store with -n, a directory store into an existing directory, also with
 * -c; each copy, without the zeroed tail, opens as a store where every run
 * is as it was and verifies.  The store's files are named as the guide says:
 * DIR/data.mdb and DIR/lock.mdb, or PATH and PATH-lock.  LMDB only.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(store_backup, .timeout = 60, .fini = t_cleanup);

#define RUNS 3

static off_t size_of(const char *path)
{
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "%s is missing", path);
    return sb.st_size;
}

/* mdb_copy ARGS..., its exit status. */
static int mdb_copy(const char *flags, const char *from, const char *to)
{
    char cmd[3 * 4200];
    snprintf(cmd, sizeof cmd, "mdb_copy %s '%s' '%s'", flags, from, to);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Runs b0..b2 of "chain" (completed), in @p e. */
static void make_runs(pl_engine *e)
{
    for (int i = 0; i < RUNS; i++) {
        char id[16];
        snprintf(id, sizeof id, "b%d", i);
        pl_outcome *o = t_start(e, "chain", NULL, id);
        cr_assert_eq(o->status, PL_RUN_COMPLETED);
        pl_outcome_free(o);
    }
}

/* The copy at @p path opens, and holds every run, completed, verified,
 * replayed with nothing executed. */
static void expect_copy(const char *path, const pl_registry *reg)
{
    pl_engine *e = t_engine(path, reg, PL_DURABILITY_SYNC);
    int before = t_calls.add;
    for (int i = 0; i < RUNS; i++) {
        char id[16];
        snprintf(id, sizeof id, "b%d", i);
        cr_expect_eq(status_of(e, id), PL_RUN_COMPLETED, "%s", id);
        cr_expect_eq(pl_run_verify(e, id), PL_OK, "%s: %s", id, pl_errmsg());
        pl_outcome *o = NULL;
        cr_expect_eq(pl_run_continue(&o, e, id, NULL), PL_OK, "%s",
                     pl_errmsg());
        cr_expect(o && o->status == PL_RUN_COMPLETED, "%s", id);
        pl_outcome_free(o);
    }
    cr_expect_eq(t_calls.add, before, "the copy's runs replay, none runs");
    pl_engine_close(e);
}

static void need_mdb_copy(void)
{
    t_lmdb_only("mdb_copy copies an LMDB store");
    if (system("command -v mdb_copy >/dev/null 2>&1") != 0)
        cr_skip_test("mdb_copy not installed (Debian's lmdb-utils)");
}

Test(store_backup, a_file_store_copied_while_in_use)
{
    need_mdb_copy();
    pl_registry *reg = t_registry();
    char store[4200], lock[4300], copy[4200], copy_c[4200];
    t_store_in(store, sizeof store, t_tmpdir(), "orders.db");
    snprintf(lock, sizeof lock, "%s-lock", store);
    snprintf(copy, sizeof copy, "%s/orders-copy.db", t_tmpdir());
    snprintf(copy_c, sizeof copy_c, "%s/orders-compact.db", t_tmpdir());
    pl_engine *e = t_engine(store, reg, PL_DURABILITY_SYNC);
    make_runs(e);
    size_of(lock); /* the file PATH with PATH-lock */
    /* in use: the engine is open */
    cr_assert_eq(mdb_copy("-n", store, copy), 0);
    cr_assert_eq(mdb_copy("-n -c", store, copy_c), 0);
    off_t live = size_of(store);
    pl_engine_close(e);
    cr_expect_lt(size_of(copy), live, "the copy has no zeroed tail");
    cr_expect_leq(size_of(copy_c), size_of(copy));
    expect_copy(copy, reg);
    expect_copy(copy_c, reg);
    pl_registry_free(reg);
}

Test(store_backup, a_directory_store_copied_while_in_use)
{
    need_mdb_copy();
    pl_registry *reg = t_registry();
    char dir[4200], data[4300], lock[4300], copy[4200];
    snprintf(dir, sizeof dir, "%s/store", t_tmpdir());
    snprintf(copy, sizeof copy, "%s/backup", t_tmpdir());
    cr_assert_eq(mkdir(dir, 0700), 0);
    cr_assert_eq(mkdir(copy, 0700), 0);
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    snprintf(lock, sizeof lock, "%s/lock.mdb", dir);
    pl_engine *e = t_engine(dir, reg, PL_DURABILITY_SYNC);
    make_runs(e);
    size_of(data); /* DIR/data.mdb with DIR/lock.mdb */
    size_of(lock);
    cr_assert_eq(mdb_copy("", dir, copy), 0);
    pl_engine_close(e);
    expect_copy(copy, reg);
    pl_registry_free(reg);
}
