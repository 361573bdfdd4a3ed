/*
 * test_store_open.c -- opening LMDB stores: one open per process (and one
 * more in a forked child, one per file whatever the path), files that are
 * not stores, directory stores, the files' mode 0600, store format
 * versions, pl_engine_open's argument checks and damaged run records.
 */
#include "support.h"
#include "support_store.h"

#include "codec.h"
#include "hash.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- opening stores ------------------------------------------------------ */

Test(store, one_open_per_process)
{
    pl_registry *reg = registry();
    const char *paths[2] = {t_store_path(), t_tmpdir()};
    for (int i = 0; i < 2; i++) {
        pl_engine *e = open_with(paths[i], reg, 0, 0);
        start_ok(e, "echo", "{\"x\": 1}", "first");
        pl_engine *again = (pl_engine *)reg;
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        int st = pl_engine_open(&again, paths[i], reg, &o);
        cr_assert_eq(st, PL_EBUSY, "second open of %s gave %s", paths[i],
                     pl_status_name(st));
        cr_assert_null(again);
        cr_assert(strstr(pl_errmsg(), "open already") != NULL, "%s",
                  pl_errmsg());
        /* the refused open did not disturb the first engine */
        start_ok(e, "echo", "{\"x\": 2}", "second");
        cr_assert_eq(pl_run_verify(e, "first"), PL_OK);
        pl_engine_close(e);

        e = open_with(paths[i], reg, 0, 0);
        cr_assert_eq(pl_run_verify(e, "first"), PL_OK, "%s", pl_errmsg());
        cr_assert_eq(pl_run_verify(e, "second"), PL_OK, "%s", pl_errmsg());
        pl_engine_close(e);
    }
    pl_engine_close(NULL);
    pl_registry_free(reg);
}

/*
 * A forked child opens the store its parent has open, as the header says it
 * must (the child holds none of its parent's stores), runs a run and exits;
 * the parent's engine goes on working, and sees the child's run.
 */
Test(store, a_forked_child_opens_its_own_engine)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "chain", "{\"n\": 2}", "before");
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) { /* nothing of Criterion's here: exit with a status */
        pl_engine *ce = NULL;
        if (pl_engine_open(&ce, path, reg, NULL))
            _exit(3);
        cJSON *p = cJSON_Parse("{\"n\": 3}");
        pl_action a = {PL_ACTION_VERSION, "chain", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "child";
        pl_outcome *o = NULL;
        int st = pl_run_start(&o, ce, &a, &ro);
        bool ok = st == PL_OK && o->status == PL_RUN_COMPLETED;
        pl_outcome_free(o);
        cJSON_Delete(p);
        pl_engine_close(ce);
        _exit(ok ? 0 : 4);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the child died (status %d)", status);
    cr_assert_eq(WEXITSTATUS(status), 0, "the child %s",
                 WEXITSTATUS(status) == 3 ? "could not open the store"
                                          : "could not run its run");

    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, e, "child"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(info->status, PL_RUN_COMPLETED);
    cr_assert_eq(info->steps, 3 * 3 + 1);
    cr_assert_eq(info->owner_pid, (int64_t)pid);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(e, "child"), PL_OK, "%s", pl_errmsg());
    start_ok(e, "chain", "{\"n\": 2}", "after");
    cr_assert_eq(pl_run_verify(e, "before"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Write @p n pseudo-random bytes to @p path. */
static void random_file(const char *path, size_t n, uint32_t seed)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    uint32_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        fputc((int)(x >> 24), f);
    }
    cr_assert_eq(fclose(f), 0);
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    char *buf = malloc(1 << 20);
    cr_assert_not_null(buf);
    *n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

Test(store, a_file_that_is_not_a_store)
{
    pl_registry *reg = registry();
    static const size_t sizes[] = {1, 100, 4096, 8192, 65536};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/junk.bin", t_tmpdir());
        random_file(path, sizes[i], (uint32_t)(i + 1));
        size_t before_n;
        char *before = slurp(path, &before_n);
        pl_engine *e = (pl_engine *)reg;
        int st = pl_engine_open(&e, path, reg, NULL);
        cr_assert_eq(st, PL_ECORRUPT, "%zu random bytes gave %s (%s)", sizes[i],
                     pl_status_name(st), pl_errmsg());
        cr_assert_null(e);
        cr_assert(strstr(pl_errmsg(), path) != NULL, "names the file: %s",
                  pl_errmsg());
        size_t after_n;
        char *after = slurp(path, &after_n);
        cr_assert_eq(after_n, before_n, "the file was changed");
        cr_assert_eq(memcmp(before, after, before_n), 0,
                     "the file was changed");
        free(before);
        free(after);
    }
    /* a directory whose data.mdb is junk */
    const char *dir = t_tmpdir();
    char data[4200];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    random_file(data, 16384, 99);
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_open(&e, dir, reg, NULL), PL_ECORRUPT, "%s",
                 pl_errmsg());
    cr_assert_null(e);
    pl_registry_free(reg);
}

/* A FIFO where the data file or the lock file should be: opening it for
 * reading would wait for a writer that never comes.  Refused at once,
 * writable or read-only (a hang fails by the timeout). */
Test(store, a_fifo_is_refused_not_waited_on, .timeout = 60)
{
    pl_registry *reg = registry();
    const char *dir = t_tmpdir();
    char fifo[4200], junk[4200], lock[4300];
    snprintf(fifo, sizeof fifo, "%s/fifo.db", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    for (int ro = 0; ro < 2; ro++) {
        pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
        o.read_only = ro;
        pl_engine *e = NULL;
        int st = pl_engine_open(&e, fifo, reg, &o);
        cr_assert_eq(st, PL_ECORRUPT, "a FIFO (read_only %d) gave %s (%s)", ro,
                     pl_status_name(st), pl_errmsg());
        cr_assert_null(e);
        cr_assert(strstr(pl_errmsg(), fifo) != NULL, "names it: %s",
                  pl_errmsg());
    }
    /* a file that is no store, beside a lock file that is a FIFO */
    snprintf(junk, sizeof junk, "%s/junk.db", dir);
    random_file(junk, 8192, 7);
    snprintf(lock, sizeof lock, "%s-lock", junk);
    cr_assert_eq(mkfifo(lock, 0600), 0);
    pl_engine *e = NULL;
    int st = pl_engine_open(&e, junk, reg, NULL);
    cr_assert_eq(st, PL_ECORRUPT, "%s (%s)", pl_status_name(st), pl_errmsg());
    cr_assert_null(e);
    pl_registry_free(reg);
}

Test(store, an_lmdb_store_of_someone_else)
{
    pl_registry *reg = registry();
    const char *path = t_store_path();
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
    /* a plain value where a named database would be */
    MDB_val k = {5, "steps"}, v = {5, "hello"};
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);

    pl_engine *e = NULL;
    int st = pl_engine_open(&e, path, reg, NULL);
    cr_assert_eq(st, PL_ECORRUPT, "%s (%s)", pl_status_name(st), pl_errmsg());
    cr_assert_null(e);
    cr_assert(strstr(pl_errmsg(), "not a policyledger store") != NULL, "%s",
              pl_errmsg());
    pl_registry_free(reg);
}

Test(store, directory_store)
{
    pl_registry *reg = registry();
    const char *dir = t_tmpdir();
    pl_engine *e = open_with(dir, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 2, \"fanout\": 2}", "in-a-dir");
    cr_assert_eq(pl_run_verify(e, "in-a-dir"), PL_OK);
    pl_engine_close(e);

    char data[4200], lock[4200];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    snprintf(lock, sizeof lock, "%s/lock.mdb", dir);
    cr_assert_gt(file_size(data), 0, "LMDB's data file is inside");
    cr_assert_eq(access(lock, F_OK), 0, "LMDB's lock file is inside");

    /* the raw layout is the same as a file store's */
    raw r;
    raw_open(&r, dir, true);
    uint64_t num = raw_run_num(&r, "in-a-dir");
    uint8_t key[64];
    size_t kl = step_key(key, num, NULL, 0, 0), n;
    uint8_t *rec = raw_get_step(&r, key, kl, &n);
    pl__rec dr;
    cr_assert_eq(pl__rec_decode(&dr, rec, n), PL_OK);
    cr_assert_eq(dr.type, PL_STEP_ACTION_CALL);
    free(rec);
    raw_close(&r);

    e = open_with(dir, reg, 0, 0);
    wants w = {0};
    nest_expect(&w, "0", 2, 2);
    expect_walk(e, "in-a-dir", &w);
    expect_ledgers(e, "in-a-dir", &w, "nest");
    free(w.v);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, store_format_record)
{
    pl_registry *reg = registry();
    const char *path = t_store_path();
    pl_engine *e = open_with(path, reg, 0, 0);
    start_ok(e, "echo", "{}", "kept");
    pl_engine_close(e);

    /* the format record says 1, as a big-endian u32 */
    raw r;
    raw_open(&r, path, false);
    MDB_val k = {6, "format"}, v;
    cr_assert_eq(mdb_get(r.txn, r.meta, &k, &v), 0);
    cr_assert_eq(v.mv_size, 4);
    cr_assert_eq(memcmp(v.mv_data, "\0\0\0\1", 4), 0);
    uint8_t two[4] = {0, 0, 0, 2};
    v.mv_size = 4;
    v.mv_data = two;
    cr_assert_eq(mdb_put(r.txn, r.meta, &k, &v, 0), 0);
    raw_close(&r);

    e = (pl_engine *)reg;
    int st = pl_engine_open(&e, path, reg, NULL);
    cr_assert_eq(st, PL_EVERSION, "%s (%s)", pl_status_name(st), pl_errmsg());
    cr_assert_null(e);
    cr_assert(strstr(pl_errmsg(), "format 2") != NULL, "%s", pl_errmsg());

    /* the refused open left the store as it was */
    raw_open(&r, path, false);
    cr_assert_eq(mdb_get(r.txn, r.meta, &k, &v), 0);
    cr_assert_eq(memcmp(v.mv_data, two, 4), 0);
    /* a format record of the wrong size */
    v.mv_size = 3;
    v.mv_data = "\0\0\1";
    cr_assert_eq(mdb_put(r.txn, r.meta, &k, &v, 0), 0);
    raw_close(&r);
    cr_assert_eq(pl_engine_open(&e, path, reg, NULL), PL_ECORRUPT, "%s",
                 pl_errmsg());
    cr_assert_null(e);

    /* no format record, but runs */
    raw_open(&r, path, false);
    cr_assert_eq(mdb_del(r.txn, r.meta, &k, NULL), 0);
    raw_close(&r);
    cr_assert_eq(pl_engine_open(&e, path, reg, NULL), PL_ECORRUPT, "%s",
                 pl_errmsg());
    cr_assert_null(e);

    /* put right, the store opens and the run is there */
    raw_open(&r, path, false);
    v.mv_size = 4;
    v.mv_data = "\0\0\0\1";
    cr_assert_eq(mdb_put(r.txn, r.meta, &k, &v, 0), 0);
    raw_close(&r);
    e = open_with(path, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "kept"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, engine_open_argument_errors)
{
    pl_registry *reg = registry();
    const char *path = t_store_path();
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    pl_engine *e = (pl_engine *)reg;

    cr_assert_eq(pl_engine_open(&e, NULL, reg, &o), PL_EINVAL);
    cr_assert_null(e, "*out is NULL after a failure");
    e = (pl_engine *)reg;
    cr_assert_eq(pl_engine_open(&e, "", reg, &o), PL_EINVAL);
    cr_assert_null(e);
    e = (pl_engine *)reg;
    cr_assert_eq(pl_engine_open(&e, path, NULL, &o), PL_EINVAL);
    cr_assert_null(e);
    cr_assert(strstr(pl_errmsg(), "registry") != NULL, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_open(NULL, path, reg, &o), PL_EINVAL);

    static const unsigned versions[] = {0, PL_ENGINE_OPTIONS_VERSION + 1, 99};
    for (size_t i = 0; i < 3; i++) {
        pl_engine_options bad = PL_ENGINE_OPTIONS_INIT;
        bad.version = versions[i];
        e = (pl_engine *)reg;
        cr_assert_eq(pl_engine_open(&e, path, reg, &bad), PL_EINVAL,
                     "options version %u", versions[i]);
        cr_assert_null(e);
        cr_assert(strstr(pl_errmsg(), "version") != NULL, "%s", pl_errmsg());
    }
    pl_engine_options badd = PL_ENGINE_OPTIONS_INIT;
    badd.durability = (pl_durability)7;
    cr_assert_eq(pl_engine_open(&e, path, reg, &badd), PL_EINVAL);
    cr_assert_null(e);

    /* none of that created the store */
    cr_assert_neq(access(path, F_OK), 0, "a refused open created %s", path);

    /* a path whose directory does not exist is refused, not crashed on */
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/no/such/dir/store.db", t_tmpdir());
    e = (pl_engine *)reg;
    int st = pl_engine_open(&e, missing, reg, &o);
    cr_assert(st == PL_EINVAL || st == PL_ESTORE, "%s", pl_status_name(st));
    cr_assert_null(e);

    /* NULL options mean the defaults */
    cr_assert_eq(pl_engine_open(&e, path, reg, NULL), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_engine_durability(e), PL_DURABILITY_SYNC);
    cr_assert_eq(pl_engine_registry(e), reg);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, damaged_run_records)
{
    const char *path = t_store_path();
    pl_registry *reg = registry();
    pl_engine *e = open_with(path, reg, 0, 0);
    static const char *const ids[] = {"newer", "garbage", "stateless", "short",
                                      "fine"};
    for (int i = 0; i < 5; i++)
        start_ok(e, "chain", "{\"n\": 2}", ids[i]);
    pl_engine_close(e);

    raw r;
    raw_open(&r, path, false);
    /* "newer": its info record says format version 3 */
    MDB_val k = {5, "newer"}, v;
    cr_assert_eq(mdb_get(r.txn, r.runs, &k, &v), 0);
    uint8_t *info = malloc(v.mv_size);
    cr_assert_not_null(info);
    memcpy(info, v.mv_data, v.mv_size);
    static const uint8_t v1[] = {0xa1, 'v', 0x02};
    uint8_t *at = NULL;
    for (size_t i = 8; i + sizeof v1 <= v.mv_size && !at; i++)
        if (!memcmp(info + i, v1, sizeof v1))
            at = info + i;
    cr_assert_not_null(at, "no \"v\": 2 in the run record");
    at[2] = 0x03;
    MDB_val nv = {v.mv_size, info};
    cr_assert_eq(mdb_put(r.txn, r.runs, &k, &nv, 0), 0);
    free(info);
    /* "garbage": its state record is not msgpack */
    uint8_t skey[8];
    uint64_t num = raw_run_num(&r, "garbage");
    for (int i = 0; i < 8; i++)
        skey[i] = (uint8_t)(num >> (56 - 8 * i));
    MDB_val sk = {8, skey}, sv = {4, "\xc1\xc1\xc1\xc1"};
    cr_assert_eq(mdb_put(r.txn, r.state, &sk, &sv, 0), 0);
    /* "stateless": no state record at all */
    num = raw_run_num(&r, "stateless");
    for (int i = 0; i < 8; i++)
        skey[i] = (uint8_t)(num >> (56 - 8 * i));
    cr_assert_eq(mdb_del(r.txn, r.state, &sk, NULL), 0);
    /* "short": a runs value too short to hold a run number */
    MDB_val shk = {5, "short"}, shv = {3, "abc"};
    cr_assert_eq(mdb_put(r.txn, r.runs, &shk, &shv, 0), 0);
    raw_close(&r);

    e = open_with(path, reg, 0, 0);
    static const struct {
        const char *id;
        int want;
    } cases[] = {{"newer", PL_EVERSION},
                 {"garbage", PL_ECORRUPT},
                 {"stateless", PL_ECORRUPT},
                 {"short", PL_ECORRUPT}};
    for (size_t i = 0; i < 4; i++) {
        pl_run_info *ri = (pl_run_info *)&ri;
        int st = pl_run_get(&ri, e, cases[i].id);
        cr_assert_eq(st, cases[i].want, "pl_run_get(%s) gave %s: %s",
                     cases[i].id, pl_status_name(st), pl_errmsg());
        cr_assert_null(ri);
        cr_assert(strstr(pl_errmsg(), cases[i].id) != NULL ||
                      strstr(pl_errmsg(), "#") != NULL,
                  "the message names the run: %s", pl_errmsg());
        pl_outcome *o = NULL;
        st = pl_run_continue(&o, e, cases[i].id, NULL);
        cr_assert_eq(st, cases[i].want, "pl_run_continue(%s) gave %s: %s",
                     cases[i].id, pl_status_name(st), pl_errmsg());
        cr_assert_null(o);
    }
    /* the good run is untouched */
    cr_assert_eq(pl_run_verify(e, "fine"), PL_OK, "%s", pl_errmsg());
    pl_run_info *ri;
    cr_assert_eq(pl_run_get(&ri, e, "fine"), PL_OK);
    cr_assert_eq(ri->status, PL_RUN_COMPLETED);
    pl_run_info_free(ri);
    /* a listing that meets a damaged record stops with its error */
    listed *l = calloc(1, sizeof *l);
    cr_assert_not_null(l);
    int st = pl_engine_runs(e, list_visit, l);
    cr_assert(st == PL_ECORRUPT || st == PL_EVERSION, "%s", pl_status_name(st));
    cr_assert_eq(l->n, 1, "only \"fine\" sorts before the first damaged run");
    free(l);
    pl_engine_close(e);
    pl_registry_free(reg);
}

Test(store, one_open_per_file_whatever_the_path)
{
    pl_registry *reg = registry();
    const char *dir = t_tmpdir();
    pl_engine *e = open_with(dir, reg, 0, 0);
    start_ok(e, "echo", "{}", "here");
    /* the same directory by another name, and its data file opened as a
     * file store: the same store */
    char alias[4200], data[4200];
    snprintf(alias, sizeof alias, "%s/.", dir);
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    const char *names[] = {alias, data};
    for (int i = 0; i < 2; i++) {
        pl_engine *again = NULL;
        int st = pl_engine_open(&again, names[i], reg, NULL);
        cr_assert_eq(st, PL_EBUSY, "opening %s again gave %s (%s)", names[i],
                     pl_status_name(st), pl_errmsg());
        cr_assert_null(again);
    }
    cr_assert_eq(pl_run_verify(e, "here"), PL_OK);
    pl_engine_close(e);
    e = open_with(alias, reg, 0, 0);
    cr_assert_eq(pl_run_verify(e, "here"), PL_OK, "%s", pl_errmsg());
    pl_engine_close(e);
    pl_registry_free(reg);
}

/* Every file in directory @p dir is a regular file of mode 0600; how many. */
static int files_0600(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "opendir %s: %s", dir, strerror(errno));
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        char p[4300];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat sb;
        cr_assert_eq(stat(p, &sb), 0, "stat %s: %s", p, strerror(errno));
        cr_expect(S_ISREG(sb.st_mode), "%s is a file", p);
        cr_expect_eq(sb.st_mode & 07777, 0600, "%s: mode %o", p,
                     (unsigned)(sb.st_mode & 07777));
        n++;
    }
    closedir(d);
    return n;
}

/* design.md §7.6: "files are created mode 0600", whatever the umask lets
 * through: a directory store's data.mdb and lock.mdb, a file store's file
 * and PATH-lock, and nothing else beside them. */
Test(store, files_are_created_mode_0600)
{
    umask(0);
    pl_registry *reg = registry();
    const char *dir = t_tmpdir();
    pl_engine *e = open_with(dir, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 1, \"fanout\": 1}", "in-a-dir");
    pl_engine_close(e);
    cr_expect_eq(files_0600(dir), 2, "data.mdb and lock.mdb");

    char path[4300];
    snprintf(path, sizeof path, "%s", t_store_path());
    e = open_with(path, reg, 0, 0);
    start_ok(e, "nest", "{\"depth\": 1, \"fanout\": 1}", "in-a-file");
    pl_engine_close(e);
    char lock[4310];
    snprintf(lock, sizeof lock, "%s-lock", path);
    cr_expect_eq(access(lock, F_OK), 0, "%s", lock);
    *strrchr(path, '/') = '\0';
    cr_expect_eq(files_0600(path), 2, "the store and its lock");
    pl_registry_free(reg);
}
