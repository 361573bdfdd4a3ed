/*
 * test_bitflip_deleted.c -- hostile store bytes in deleted and continued
 * runs' records: every bit of the tombstones, of a purge record and of a
 * chain's links' state records, flipped in turn (support_bitflip.h: how a
 * flip is made and tried).
 */
#define _GNU_SOURCE
#include "support_bitflip.h"

/* ---- deleted runs: tombstones and purge records -------------------------- */

/*
 * A store with a completed run ("done"), a run deleted ("gone-1": its
 * tombstone), one deleted but whose steps are not yet removed ("gone-2":
 * its tombstone, and its purge record, as a prune killed between the two
 * leaves them), and a run continued as new ("chain", whose state names its
 * successor "chain~1", whose state names it).  A child reads both
 * tombstones and both links, tries to start "gone-1" again, prunes (which
 * goes through the purge record first), and verifies "done": a flip in a
 * tombstone, a purge record or a link's state record is reported, and
 * never costs "done" a step.
 */
static report deleted_child(const char *path, const pl_registry *reg, int fd)
{
    report r = {false, false, 14695981039346656037ull};
    stage(fd, 'o');
    pl_engine *e = open_engine(path, reg);
    if (!e) {
        note(&r, PL_ECORRUPT);
    } else {
        static const char *const gone[] = {"gone-1", "gone-2"};
        for (size_t i = 0; i < 2; i++) {
            stage(fd, 'd');
            pl_tombstone t = PL_TOMBSTONE_INIT;
            int st = pl_run_tombstone(&t, e, gone[i]);
            note(&r, st);
            t_mix(&r.digest, &st, sizeof st);
            if (!st)
                t_mix(&r.digest, &t, sizeof t);
        }
        static const char *const links[] = {"chain", "chain~1"};
        for (size_t i = 0; i < 2; i++) {
            stage(fd, 'i');
            pl_run_info *ri = NULL;
            int st = pl_run_get(&ri, e, links[i]);
            note(&r, st);
            t_mix(&r.digest, &st, sizeof st);
            if (!st) {
                t_mix(&r.digest, &ri->status, sizeof ri->status);
                t_mix_str(&r.digest, ri->successor);
                t_mix_str(&r.digest, ri->predecessor);
            }
            pl_run_info_free(ri);
        }
        stage(fd, 'n');
        cJSON *p = cJSON_CreateObject();
        pl_action a = {PL_ACTION_VERSION, "outer", p, NULL, 0, NULL};
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = "gone-1";
        pl_outcome *o = NULL;
        int st = pl_run_start(&o, e, &a, &ro);
        note(&r, st);
        t_mix(&r.digest, &st, sizeof st);
        pl_outcome_free(o);
        cJSON_Delete(p);
        stage(fd, 'p');
        pl_prune_options po = PL_PRUNE_OPTIONS_INIT;
        po.statuses = 1u << PL_RUN_FAILED; /* "done" stays */
        note(&r, pl_engine_prune(e, &po, NULL));
        stage(fd, 'v');
        /* whatever the flip, "done" is whole: nothing else counts */
        r.nondet = pl_run_verify(e, "done") != PL_OK;
        pl_engine_close(e);
    }
    return r;
}

static uint8_t *build_deleted(const char *path, const pl_registry *reg,
                              size_t *len)
{
    pl_engine *e = open_engine(path, reg);
    cr_assert_not_null(e, "%s", pl_errmsg());
    static const char *const ids[] = {"done", "gone-1", "gone-2"};
    for (size_t i = 0; i < 3; i++) {
        pl_outcome *o = t_start(e, "outer", "{}", ids[i]);
        cr_assert_eq(o->status, PL_RUN_COMPLETED);
        pl_outcome_free(o);
    }
    cr_assert_eq(pl_run_delete(e, "gone-1"), PL_OK, "%s", pl_errmsg());
    /* gone-2: deleted, its steps left under its purge record */
    uint64_t num;
    pl__buf state = {0}, tomb = {0};
    cr_assert_eq(pl__store_run_find(e->store, "gone-2", &num, NULL), PL_OK);
    cr_assert_eq(pl__store_state_get(e->store, num, &state), PL_OK);
    pl__tomb t = {.status = PL_RUN_COMPLETED,
                  .created_us = 1,
                  .deleted_us = 2,
                  .expires_us = INT64_MAX / 2};
    snprintf(t.policy, sizeof t.policy, "outer");
    cr_assert_eq(pl__tomb_encode(&tomb, "gone-2", &t), PL_OK);
    pl__delete d = {"gone-2", num, state.data, state.len, &tomb, -1};
    cr_assert_eq(pl__store_delete(e->store, &d, 1), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(d.rc, PL_OK);
    pl__buf_free(&state);
    pl__buf_free(&tomb);
    /* chain -> chain~1 (run numbers 4 and 5) */
    pl_outcome *o = t_start(e, "chain_once", "{}", "chain");
    cr_assert_eq(o->status, PL_RUN_CONTINUED);
    pl_outcome_free(o);
    pl_engine_close(e);

    return read_whole(path, len);
}

Test(bitflip, every_bit_of_tombstones_and_purge_records, .timeout = 600)
{
    const char *dir = t_tmpdir();
    char orig[4200], copy[4200];
    snprintf(orig, sizeof orig, "%s/orig.db", dir);
    snprintf(copy, sizeof copy, "%s/flip.db", dir);
    pl_registry *reg = registry();
    size_t len;
    uint8_t *data = build_deleted(orig, reg, &len);
    targets keys = {0}, vals = {0};
    static const char *const dbs[] = {"tombs", "purge", "state"};
    find_targets_in(orig, dbs, 3, &keys, &vals, NULL, 0);
    /* of the state records, the two links' (run numbers 4 and 5) */
    size_t kept = 0;
    for (size_t i = 0; i < keys.n; i++) {
        if (!strcmp(keys.v[i].db, "state") &&
            (keys.v[i].len != 8 || data[keys.v[i].off + 7] < 4))
            continue;
        keys.v[kept] = keys.v[i];
        vals.v[kept++] = vals.v[i];
    }
    keys.n = vals.n = kept;
    cr_assert_eq(vals.n, 5, "two tombstones, a purge record, two links");
    report base = try_unflipped(deleted_child, copy, reg, data, len);
    cr_assert_not(base.reported, "the unflipped store reports corruption");
    cr_assert_not(base.nondet, "the unflipped store's \"done\" is whole");
    flip_list fs = {0};
    for (int pass = 0; pass < 2; pass++) {
        const targets *ts = pass ? &vals : &keys;
        for (size_t i = 0; i < ts->n; i++) {
            const target *t = &ts->v[i];
            for (size_t byte = 0; byte < t->len; byte++) {
                for (unsigned bit = 0; bit < 8; bit++) {
                    if (pass && (byte * 8 + bit) % SAMPLE != 0)
                        continue;
                    flip_add(&fs, t->off + byte, bit, pass ? t : NULL,
                             "%s of %s/%s, byte %zu, bit %u",
                             pass ? "value" : "key", t->db, t->key, byte, bit);
                }
            }
        }
    }
    report *rs = try_flips_in(deleted_child, copy, reg, data, len, &fs);
    size_t flips = fs.n, reported = 0;
    for (size_t i = 0; i < fs.n; i++) {
        bool value = fs.v[i].t != NULL; /* a key's flips have none */
        reported += rs[i].reported;
        /* a changed key may hide "done"'s own records (a B-tree out of
         * order), which is reported; a purge that took its steps
         * unreported would not be */
        cr_assert(!rs[i].nondet || (!value && rs[i].reported),
                  "%s: \"done\" lost a step", fs.v[i].what);
        /* every byte of a record is checksummed and bound to its id or
         * number: a changed value is reported */
        cr_assert(!value || rs[i].reported,
                  "%s: changed a record, and no call reported it",
                  fs.v[i].what);
    }
    free(rs);
    free(fs.v);
    fprintf(stderr,
            "bitflip deleted and continued runs: %zu bits flipped in %zu "
            "keys and %zu values (tombstones, purge record, chain links): "
            "%zu reported, \"done\" whole after every one\n",
            flips, keys.n, vals.n, reported);
    free(keys.v);
    free(vals.v);
    free(data);
    pl_registry_free(reg);
}
