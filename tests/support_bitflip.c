/*
 * support_bitflip.c -- what the bit-flip tests share (support_bitflip.h).
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdarg.h>

#include "support_bitflip.h"

/* ---- the policies -------------------------------------------------------- */

bool g_die;

static int call_one(pl_ctx *ctx, const char *policy, const char *json,
                    cJSON **out)
{
    cJSON *p = cJSON_Parse(json);
    int st = pl_ctx_invoke(out, ctx, policy, p);
    cJSON_Delete(p);
    return st;
}

/* outer: chain(n=1), a version point (its marker step), then echo;
 * returns both. */
static int outer(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *x = NULL, *y = NULL;
    int v = 0;
    int st = call_one(ctx, "chain", "{\"n\": 1}", &x);
    if (!st)
        st = pl_ctx_version(&v, ctx, "flip", 0, 1);
    if (!st)
        st = call_one(ctx, "echo", "{\"m\": 7}", &y);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O, s:O}", "x", x, "y", y);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return st;
}

/* ask: echo, then the human "approve". */
static int ask(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *x = NULL, *y = NULL;
    int st = call_one(ctx, "echo", "{\"q\": 1}", &x);
    if (!st)
        st = call_one(ctx, "approve", "{\"ok?\": true}", &y);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "answer", y);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return st;
}

/* die: not idempotent; kills its own process when g_die is set. */
static int die(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)ctx;
    (void)user;
    if (g_die)
        kill(getpid(), SIGKILL);
    return pl_steps_add_result(out, a->payload);
}

/* boom: add, then die. */
static int boom(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *x = NULL, *y = NULL;
    int st = call_one(ctx, "add", "{\"a\": 1, \"b\": 2}", &x);
    if (!st)
        st = call_one(ctx, "die", "{\"d\": 1}", &y);
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "y", y);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return st;
}

/* A run that continues as new once: {} -> {"next": true}. */
static int chain_once(pl_ctx *ctx, const pl_action *a, pl_steps *out,
                      void *user)
{
    (void)user;
    if (!cJSON_GetObjectItem(a->payload, "next")) {
        cJSON *next = cJSON_CreateObject();
        cJSON_AddTrueToObject(next, "next");
        int st = pl_ctx_continue_as_new(ctx, next);
        cJSON_Delete(next);
        if (st)
            return st;
    }
    return pl_steps_add_result(out, pl_json_empty());
}

/* waitev: waits a day for the event "go"; cancelled, it makes a
 * compensating call. */
static int waitev(pl_ctx *ctx, const pl_action *a, pl_steps *out, void *user)
{
    (void)a;
    (void)user;
    cJSON *p = NULL;
    int st = pl_ctx_wait_event(&p, ctx, "go", 86400000);
    if (st == PL_ECANCELLED) {
        st = call_one(ctx, "echo", "{\"undo\": 1}", NULL);
        return st ? st : PL_ECANCELLED;
    }
    if (!st)
        st = pl_steps_add_resultf(out, "{s:O}", "got", p);
    cJSON_Delete(p);
    return st;
}

pl_registry *registry(void)
{
    pl_registry *reg = t_registry();
    struct {
        const char *name;
        pl_policy_fn fn;
        bool idem;
    } defs[] = {{"chain_once", chain_once, true},
                {"outer", outer, true},
                {"ask", ask, true},
                {"boom", boom, true},
                {"die", die, false},
                {"waitev", waitev, true}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        pl_policy_def d = PL_POLICY_DEF_INIT;
        d.name = defs[i].name;
        d.fn = defs[i].fn;
        d.idempotent = defs[i].idem;
        cr_assert_eq(pl_registry_add(reg, &d), PL_OK, "%s", pl_errmsg());
    }
    cr_assert_eq(pl_registry_add_human(reg, "approve"), PL_OK);
    return reg;
}

pl_engine *open_engine(const char *path, const pl_registry *reg)
{
    pl_engine_options o = PL_ENGINE_OPTIONS_INIT;
    o.durability = PL_DURABILITY_PROCESS; /* no zeroed tail: a small file */
    pl_engine *e = NULL;
    return pl_engine_open(&e, path, reg, &o) ? NULL : e;
}

uint8_t *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    struct stat sb;
    cr_assert_eq(fstat(fileno(f), &sb), 0);
    uint8_t *data = malloc((size_t)sb.st_size);
    cr_assert_not_null(data);
    cr_assert_eq(fread(data, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
    fclose(f);
    *len = (size_t)sb.st_size;
    return data;
}

/* ---- where the keys and values are ------------------------------------- */

static void add_target(targets *t, const target *x)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->v = realloc(t->v, t->cap * sizeof *t->v);
        cr_assert_not_null(t->v);
    }
    t->v[t->n++] = *x;
}

static void printable(char *out, size_t n, const MDB_val *k)
{
    size_t w = 0;
    const uint8_t *p = k->mv_data;
    for (size_t i = 0; i < k->mv_size && w + 4 < n; i++)
        w += (size_t)snprintf(out + w, n - w,
                              p[i] >= 0x20 && p[i] < 0x7f ? "%c" : "\\x%02x",
                              p[i]);
}

/*
 * Where a pointer LMDB gave into its map is in the data file: its page
 * starts at the page boundary below it (the map is page-aligned; a big
 * value's overflow pages start one), and a page's header begins with its
 * page number.
 */
static size_t file_offset(const void *p, size_t psize)
{
    uintptr_t at = (uintptr_t)p, page = at & ~(uintptr_t)(psize - 1);
    uint64_t pgno;
    memcpy(&pgno, (const void *)page, sizeof pgno);
    return (size_t)pgno * psize + (size_t)(at - page);
}

void find_targets_in(const char *path, const char *const *dbs, size_t n_dbs,
                     targets *keys, targets *vals, const uint8_t *crashed_last,
                     size_t crashed_last_len)
{
    MDB_env *env;
    MDB_txn *txn;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_RDONLY | MDB_NOSUBDIR, 0600), 0);
    MDB_stat ms;
    cr_assert_eq(mdb_env_stat(env, &ms), 0);
    size_t psize = ms.ms_psize;
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    for (size_t d = 0; d < n_dbs; d++) {
        MDB_dbi dbi;
        cr_assert_eq(mdb_dbi_open(txn, dbs[d], 0, &dbi), 0);
        MDB_cursor *cur;
        cr_assert_eq(mdb_cursor_open(txn, dbi, &cur), 0);
        MDB_val k, v;
        for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); !rc;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            target t = {0};
            snprintf(t.db, sizeof t.db, "%s", dbs[d]);
            printable(t.key, sizeof t.key, &k);
            t.root_last_of_running = crashed_last && d == 3 &&
                                     k.mv_size == crashed_last_len &&
                                     !memcmp(k.mv_data, crashed_last,
                                             crashed_last_len);
            t.run = d == 3 && k.mv_size >= 8 ? ((const uint8_t *)k.mv_data)[7]
                                             : 0;
            t.off = file_offset(k.mv_data, psize);
            t.len = k.mv_size;
            add_target(keys, &t);
            t.off = file_offset(v.mv_data, psize);
            t.len = v.mv_size;
            add_target(vals, &t);
        }

        mdb_cursor_close(cur);
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
}

/* ---- one flip ------------------------------------------------------------- */

void note(report *r, int st)
{
    if (st == PL_ECORRUPT || st == PL_EVERSION)
        r->reported = true;
    if (st == PL_ENONDET)
        r->nondet = true;
    t_mix(&r->digest, &st, sizeof st);
}

void stage(int fd, char c)
{
    ssize_t w = write(fd, &c, 1);
    (void)w;
}

static const char *stage_name(char c)
{
    switch (c) {
    case 'o': return "pl_engine_open";
    case 'l': return "pl_engine_runs";
    case 's': return "pl_schedule_list";
    case 'w': return "pl_run_walk";
    case 'g': return "pl_run_ledger";
    case 'v': return "pl_run_verify";
    case 'c': return "pl_run_continue (check)";
    case 'r': return "pl_run_continue";
    case 'b': return "pl_rate_take";
    case 'u': return "pl_rate_take_units";
    case 't': return "pl_engine_wake";
    case 'd': return "pl_run_tombstone";
    case 'i': return "pl_run_get";
    case 'n': return "pl_run_start";
    case 'p': return "pl_engine_prune";
    case 'f': return "writing the flipped copy";
    default: return "?";
    }
}

void flip_add(flip_list *fs, size_t off, unsigned bit, const target *t,
              const char *fmt, ...)
{
    if (fs->n == fs->cap) {
        fs->cap = fs->cap ? fs->cap * 2 : 256;
        fs->v = realloc(fs->v, fs->cap * sizeof *fs->v);
        cr_assert_not_null(fs->v);
    }
    flip *f = &fs->v[fs->n++];
    f->off = off;
    f->bit = bit;
    f->t = t;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->what, sizeof f->what, fmt, ap);
    va_end(ap);
}

/* In the child: @p data with @p f's bit flipped, as a new file at @p path
 * (an engine an earlier flip left open keeps the old one); false if it
 * cannot be written. */
static bool write_flipped(const char *path, const uint8_t *data, size_t len,
                          const flip *f)
{
    char lock[4200];
    snprintf(lock, sizeof lock, "%s-lock", path);
    unlink(lock);
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return false;
    bool ok = write(fd, data, len) == (ssize_t)len;
    if (ok && f->bit < 8) {
        uint8_t b = (uint8_t)(data[f->off] ^ (1u << f->bit));
        ok = pwrite(fd, &b, 1, (off_t)f->off) == 1;
    }
    return close(fd) == 0 && ok;
}

/* The child of try_batch(): flips @p v[0..n) in turn; never returns. */
static void batch_child(child_fn fn, const char *path, const pl_registry *reg,
                        const uint8_t *data, size_t len, const flip *v,
                        size_t n, int fd)
{
    /* LMDB's 2 MiB dirty list, calloc'ed at every open, from fresh zero
     * pages rather than cleared copy-on-write pages of the parent's heap:
     * a third of each flip's time went there */
    mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
    for (size_t i = 0; i < n; i++) {
        stage(fd, 'f');
        if (!write_flipped(path, data, len, &v[i]))
            _exit(2);
        report r = fn(path, reg, fd);
        stage(fd, '=');
        if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
            _exit(2);
    }
    _exit(0);
}

/* Flips @p v[0..n) in one child, their reports in @p out. */
static void try_batch(child_fn fn, const char *path, const pl_registry *reg,
                      const uint8_t *data, size_t len, const flip *v, size_t n,
                      report *out)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        batch_child(fn, path, reg, data, len, v, n, fds[1]);
    }
    close(fds[1]);
    /* read the child's stages and reports until the pipe closes (it has
     * exited), or kill it once HANG_MS have passed without progress */
    char last = '?';
    size_t done = 0, got = 0; /* flips reported; bytes of the next report */
    bool in_report = false;
    int ws = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long spent = (now.tv_sec - t0.tv_sec) * 1000 +
                     (now.tv_nsec - t0.tv_nsec) / 1000000;
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int ready = spent < HANG_MS ? poll(&pfd, 1, (int)(HANG_MS - spent)) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            close(fds[0]);
            cr_assert_fail("%s: %s made no progress for %d ms (a hang)",
                           v[done < n ? done : n - 1].what, stage_name(last),
                           HANG_MS);
        }
        uint8_t buf[256];
        ssize_t k = read(fds[0], buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;                           /* the child has exited */
        clock_gettime(CLOCK_MONOTONIC, &t0); /* progress: the guard restarts */
        for (ssize_t i = 0; i < k; i++) {
            if (!in_report) {
                if (buf[i] == '=')
                    in_report = true;
                else
                    last = (char)buf[i];
                continue;
            }
            cr_assert_lt(done, n, "a report past the batch's last flip");
            ((uint8_t *)&out[done])[got++] = buf[i];
            if (got == sizeof *out) {
                done++;
                got = 0;
                in_report = false;
                last = '?';
            }
        }
    }
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    close(fds[0]);
    const char *what = v[done < n ? done : n - 1].what;
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "%s: the child died in %s (status %#x)", what, stage_name(last),
              ws);
    cr_assert_eq(done, n, "%s: no report from the child", what);
}

report *try_flips_in(child_fn fn, const char *path, const pl_registry *reg,
                     const uint8_t *data, size_t len, const flip_list *fs)
{
    report *out = calloc(fs->n + 1, sizeof *out); /* + 1: never calloc(0) */
    cr_assert_not_null(out);
    for (size_t at = 0; at < fs->n; at += FLIP_BATCH) {
        size_t n = fs->n - at < FLIP_BATCH ? fs->n - at : FLIP_BATCH;
        try_batch(fn, path, reg, data, len, fs->v + at, n, out + at);
    }
    return out;
}

report try_unflipped(child_fn fn, const char *path, const pl_registry *reg,
                     const uint8_t *data, size_t len)
{
    flip f = {0, 8, NULL, "the store as built"};
    flip_list fs = {&f, 1, 1};
    report *rs = try_flips_in(fn, path, reg, data, len, &fs);
    report r = rs[0];
    free(rs);
    return r;
}
