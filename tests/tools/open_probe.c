/*
 * open_probe -- opens a store as an embedder does, or makes another
 * program's LMDB file, for the tests of what an open may do to a file.
 *
 *   open_probe PATH ro | rw | rw-existing
 *       pl_engine_open() read-only, read-write (creating a missing store,
 *       the default), or read-write with no_create; prints "opened" or the
 *       status name and message, and exits 0 when it opened, else 1.  An
 *       opened store's runs are listed (each id on a line), so a whole
 *       store is read through.
 *   open_probe PATH foreign [meta]
 *       write an LMDB file (PATH, its lock PATH-lock) as another program
 *       would: plain keys in the main database and a named database
 *       "config"; with "meta", also a database "meta" holding a 4-byte
 *       "format" record, as a store's does.
 */
#include <stdio.h>
#include <string.h>

#include <lmdb.h>
#include <policyledger.h>

static int list(const pl_run_info *ri, void *user)
{
    (void)user;
    printf("run %s\n", ri->id);
    return 0;
}

static int put(MDB_txn *txn, MDB_dbi dbi, const char *k, const void *v,
               size_t n)
{
    MDB_val key = {strlen(k), (void *)k}, val = {n, (void *)v};
    return mdb_put(txn, dbi, &key, &val, 0);
}

static int foreign(const char *path, bool meta)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi main, config, m;
    int rc = mdb_env_create(&env);
    if (!rc)
        rc = mdb_env_set_maxdbs(env, 4);
    if (!rc)
        rc = mdb_env_open(env, path, MDB_NOSUBDIR, 0600);
    if (!rc)
        rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (!rc && !(rc = mdb_dbi_open(txn, NULL, 0, &main)))
        rc = put(txn, main, "owner", "another program", 15);
    if (!rc && !(rc = mdb_dbi_open(txn, "config", MDB_CREATE, &config)))
        rc = put(txn, config, "colour", "blue", 4);
    if (!rc && meta && !(rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &m)))
        rc = put(txn, m, "format", "\0\0\0\1", 4);
    if (!rc)
        rc = mdb_txn_commit(txn);
    mdb_env_close(env);
    if (rc)
        fprintf(stderr, "open_probe: %s\n", mdb_strerror(rc));
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[2], "foreign"))
        return foreign(argv[1], argc > 3 && !strcmp(argv[3], "meta"));
    if (argc != 3) {
        fprintf(stderr, "usage: open_probe PATH ro|rw|rw-existing|foreign\n");
        return 2;
    }
    pl_registry *reg = NULL;
    pl_engine *e = NULL;
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.read_only = !strcmp(argv[2], "ro");
    o.no_create = !strcmp(argv[2], "rw-existing");
    int st = pl_registry_new(&reg);
    if (!st)
        st = pl_engine_open(&e, argv[1], reg, &o);
    if (!st)
        st = pl_engine_runs(e, list, NULL);
    if (st)
        printf("%s: %s\n", pl_status_name(st), pl_errmsg());
    else
        printf("opened\n");
    pl_engine_close(e);
    pl_registry_free(reg);
    return st ? 1 : 0;
}
