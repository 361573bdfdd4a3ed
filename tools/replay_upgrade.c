/*
 * replay_upgrade.c -- ledger-replay --upgrade: a run that the loaded code
 * cannot replay is forked before its first divergence, ended `superseded`
 * (pl_run_upgrade()), and its successor continued with the loaded code.
 *
 * The cut: a check replay (nothing written) finds the first divergence,
 * or the version point the code does not support; the run is cut at the
 * root step that holds it (the step itself, or the call whose callee
 * diverged), so everything before it is kept and served.
 *
 * The plan, printed before anything is written (and alone with
 * --dry-run): the cut, and every call and side effect the old run recorded
 * after it.  Each of those ran once, under the old run; the new run makes
 * again those that the new code makes again, under its own run id, so
 * with other idempotency keys: they are the side effects that may repeat,
 * listed with the key the old run gave each (so its provider can be asked
 * whether it was done).  After the upgrade, the calls the new run made
 * again are named.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

/* A call or side effect recorded after the cut. */
typedef struct cut_item {
    char *step_id;
    bool call;       /* an action_call; else a side effect */
    char *name;      /* the policy called, or the side effect's name */
    cJSON *input;    /* a call's payload, to know it again */
    bool repeated;   /* the new run called the same policy again */
    bool same_input; /* ... with the same input */
} cut_item;

typedef struct plan {
    const char *id;
    uint32_t at;
    char at_id[24];
    char why[600];
    bool *answered; /* root calls before the cut answered before it */
    cut_item *v;
    size_t n;
    bool oom;
} plan;

static void plan_free(plan *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->v[i].step_id);
        free(p->v[i].name);
        cJSON_Delete(p->v[i].input);
    }
    free(p->v);
    free(p->answered);
}

/*
 * Replay @p id in check mode and find its cut: 1 when it diverges (or
 * needs a version the code does not support) and p->at is set; 0 when it
 * replays; -1 when it cannot be checked (reported).
 */
static int find_cut(tool *t, const char *id, plan *p)
{
    watch_clear(&t->w);
    pl_outcome *o = NULL;
    pl_run_options ro = PL_RUN_OPTIONS_INIT;
    ro.check = true;
    int st = pl_run_continue(&o, t->engine, id, &ro);
    pl_outcome_free(o);
    const char *path = NULL;
    uint32_t seq = 0;
    if (st == PL_ENONDET && t->w.div.seen) {
        const divergence *d = &t->w.div;
        path = d->path;
        seq = d->seq;
        snprintf(p->why, sizeof p->why,
                 "first divergence at %s: recorded %s by '%s' (code %s), now "
                 "%s by '%s' (code %s)",
                 or_dash(d->step_id),
                 d->rec_type ? pl_step_type_name(d->rec_type) : "nothing",
                 or_dash(d->rec_actor), or_dash(d->rec_code),
                 d->new_type ? pl_step_type_name(d->new_type)
                             : "nothing (the policy ends there)",
                 or_dash(d->new_actor), or_dash(d->new_code));
    } else if (st == PL_ECODEVERSION) {
        for (size_t i = 0; i < t->w.n_versions && !path; i++) {
            const version_seen *v = &t->w.versions[i];
            if (v->status) {
                path = v->path;
                seq = v->seq;
                snprintf(p->why, sizeof p->why,
                         "change '%s' at %s:%u: version %d, which the loaded "
                         "code does not support",
                         v->change, or_dash(v->path), v->seq, v->version);
            }
        }
    } else if (!st || st == PL_ECHECK) {
        return 0;
    }
    if (!path) {
        report_refused(t, id, st, refused_code(st));
        return -1;
    }
    /* the root step that holds it: "0" itself, or the call "0.<k>..." */
    if (strcmp(path, "0") != 0) {
        char *end;
        unsigned long k = strtoul(path + 2, &end, 10);
        seq = (uint32_t)k;
    }
    p->at = seq;
    snprintf(p->at_id, sizeof p->at_id, "0:%u", seq);
    return 1;
}

/* Which root calls before the cut were answered before it: results come
 * in the order of their calls (a fan-out's too). */
static int root_answers(tool *t, plan *p)
{
    pl_steps *root = NULL;
    int st = pl_run_ledger(&root, t->engine, p->id, "0");
    if (st)
        return st;
    size_t n = pl_steps_count(root);
    uint32_t *open = calloc(n + 1, sizeof *open);
    p->answered = calloc((size_t)p->at + 1, sizeof *p->answered);
    if (!open || !p->answered) {
        free(open);
        pl_steps_free(root);
        return PL_ENOMEM;
    }
    size_t head = 0, tail = 0;
    for (size_t i = 0; i < n && i < p->at; i++) {
        pl_step_type ty = pl_step_type_of(pl_steps_at(root, i));
        if (ty == PL_STEP_ACTION_CALL)
            open[tail++] = (uint32_t)i;
        else if (ty == PL_STEP_ACTION_RESULT && head < tail)
            p->answered[open[head++]] = true;
    }
    free(open);
    pl_steps_free(root);
    return PL_OK;
}

/*
 * Is the step at @p step_id ("path:seq") one the new run may make again: a
 * step after the cut, a step in the callee ledger of a call that was not
 * answered before it, or such a call itself (in doubt at the cut, it runs
 * again as its policy's in-doubt rule says)?
 */
static bool dropped(const plan *p, const char *step_id, bool call)
{
    unsigned long k = strtoul(step_id + 2, NULL, 10);
    if (!strncmp(step_id, "0:", 2))
        return k >= p->at || (call && !p->answered[k]);
    return k >= p->at || !p->answered[k]; /* "0.<k>...": a callee's */
}

static int collect(const pl_step *s, void *user)
{
    plan *p = user;
    pl_step_type ty = pl_step_type_of(s);
    if ((ty != PL_STEP_ACTION_CALL && ty != PL_STEP_SIDE_EFFECT) ||
        !dropped(p, pl_step_id(s), ty == PL_STEP_ACTION_CALL))
        return 0;
    const cJSON *pl = pl_step_payload(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(
        pl, ty == PL_STEP_ACTION_CALL ? "policy" : "name");
    if (!cJSON_IsString(name))
        return 0;
    /* the engine's own recorded values repeat nothing outside */
    static const char *const own[] = {"now", "random", "uuid", "version"};
    for (size_t i = 0; ty == PL_STEP_SIDE_EFFECT && i < 4; i++)
        if (!strcmp(name->valuestring, own[i]))
            return 0;
    cut_item *grown = realloc(p->v, (p->n + 1) * sizeof *grown);
    if (!grown)
        return PL_ENOMEM;
    p->v = grown;
    cut_item *it = &p->v[p->n++];
    memset(it, 0, sizeof *it);
    it->call = ty == PL_STEP_ACTION_CALL;
    it->step_id = dup_or_null(pl_step_id(s), &p->oom);
    it->name = dup_or_null(name->valuestring, &p->oom);
    if (it->call)
        it->input = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(pl,
                                                                     "payload"),
                                    true);
    return p->oom ? PL_ENOMEM : 0;
}

static void print_plan(const tool *t, const plan *p)
{
    if (t->opt.json)
        return;
    /* what the store holds, its control characters escaped (cli_text()) */
    printf("upgrade %s: %s\n", cli_text(p->id), cli_text(p->why));
    printf("  fork at %s: root steps before it are kept and served; the new "
           "run goes on from there with the loaded code\n",
           cli_text(p->at_id));
    if (!p->n) {
        printf("  no call or side effect was recorded after %s: nothing can "
               "repeat\n",
               cli_text(p->at_id));
        return;
    }
    printf("  may repeat: %zu call(s) and side effect(s) that %s recorded "
           "after %s (or had in flight there) ran once; each runs again if "
           "the new code makes it again, under the new run's id (another "
           "idempotency key):\n",
           p->n, cli_text(p->id), cli_text(p->at_id));
    for (size_t i = 0; i < p->n; i++)
        printf("    %-10s %-8s %-24s idempotency key %s/%s\n",
               cli_text(p->v[i].step_id), p->v[i].call ? "call" : "effect",
               cli_text(p->v[i].name), cli_text(p->id),
               cli_text(p->v[i].step_id));
}

static cJSON *json_plan(const plan *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *a = o ? cJSON_AddArrayToObject(o, "may_repeat") : NULL;
    if (!a)
        return o;
    cJSON_AddStringToObject(o, "fork_at", p->at_id);
    cJSON_AddStringToObject(o, "why", p->why);
    for (size_t i = 0; i < p->n; i++) {
        cJSON *x = cJSON_CreateObject();
        if (!x)
            break;
        char key[PL_MAX_RUN_ID + 200];
        snprintf(key, sizeof key, "%s/%s", p->id, p->v[i].step_id);
        cJSON_AddStringToObject(x, "step_id", p->v[i].step_id);
        cJSON_AddStringToObject(x, "kind", p->v[i].call ? "call" : "effect");
        cJSON_AddStringToObject(x, "name", p->v[i].name);
        cJSON_AddStringToObject(x, "idempotency_key", key);
        cJSON_AddBoolToObject(x, "repeated", p->v[i].repeated);
        if (p->v[i].repeated)
            cJSON_AddBoolToObject(x, "same_input", p->v[i].same_input);
        cJSON_AddItemToArray(a, x);
    }
    return o;
}

/* The calls the new run @p nid made after the cut to a policy the old run
 * had called there too (each old call matched once, in order): mark them
 * repeated, and say whether the input was the same. */
typedef struct repeat_ctx {
    plan *p;
    const char *nid;
    bool json;
} repeat_ctx;

static int mark_repeats(const pl_step *s, void *user)
{
    repeat_ctx *rc = user;
    plan *p = rc->p;
    if (pl_step_type_of(s) != PL_STEP_ACTION_CALL ||
        !dropped(p, pl_step_id(s), true))
        return 0;
    const cJSON *pl = pl_step_payload(s);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(pl, "policy");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(pl, "payload");
    for (size_t i = 0; cJSON_IsString(name) && i < p->n; i++) {
        cut_item *it = &p->v[i];
        if (!it->call || it->repeated || strcmp(it->name, name->valuestring))
            continue;
        it->repeated = true;
        it->same_input = cJSON_Compare(it->input, in, true);
        if (!rc->json)
            printf("  called again: %s at %s, %s (old key %s/%s, new key "
                   "%s/%s)\n",
                   cli_text(it->name), cli_text(pl_step_id(s)),
                   it->same_input ? "the same input" : "another input",
                   cli_text(p->id), cli_text(it->step_id), cli_text(rc->nid),
                   cli_text(pl_step_id(s)));
        break;
    }
    return 0;
}

/* Upgrade run @p id.  @p named: asked for by --upgrade ID, so a run that
 * replays is a refusal (and --new-id applies).  1 when it diverged (and
 * was upgraded, or planned), 0 when it replays, -1 on a failure. */
static int upgrade_one(tool *t, const char *id, bool named)
{
    plan p;
    memset(&p, 0, sizeof p);
    p.id = id;
    int cut = find_cut(t, id, &p);
    if (cut <= 0) {
        if (cut == 0 && named) {
            cli_error("run %s replays under the loaded code: nothing to "
                      "upgrade",
                      QUOTE(id));
            cJSON *j = json_run(t, id);
            if (j)
                cJSON_AddStringToObject(j, "upgrade", "not_needed");
            worst(t, EXIT_USAGE);
        }
        plan_free(&p);
        return cut;
    }
    int st = root_answers(t, &p);
    if (!st)
        st = pl_run_walk(t->engine, id, collect, &p);
    if (st || p.oom) {
        cli_error("run %s: reading its steps for the plan: %s (%s)", QUOTE(id),
                  st && st != PL_ENOMEM ? pl_errmsg() : "out of memory",
                  pl_status_name(st ? st : PL_ENOMEM));
        worst(t, EXIT_OPEN);
        t->refused_st = st ? st : PL_ENOMEM; /* for --all-diverged's count */
        plan_free(&p);
        return -1;
    }
    print_plan(t, &p);
    cJSON *j = json_run(t, id);
    if (t->opt.dry_run) {
        if (j) {
            cJSON_AddStringToObject(j, "upgrade", "planned");
            cJSON_AddItemToObject(j, "plan", json_plan(&p));
        }
        if (!t->opt.json)
            printf("  dry run: nothing written\n");
        plan_free(&p);
        return 1;
    }
    char *nid = NULL;
    st = pl_run_upgrade(&nid, t->engine, id, p.at_id,
                        named ? t->opt.new_id : NULL);
    if (st) {
        if (j)
            cJSON_DeleteItemFromArray(t->runs, cJSON_GetArraySize(t->runs) - 1);
        /* a --new-id taken is a refusal, as --fork's */
        report_refused(t, id, st,
                       st == PL_EEXIST ? EXIT_USAGE : refused_code(st));
        plan_free(&p);
        return -1;
    }
    if (!t->opt.json)
        printf("  run %s is superseded by run %s\n", cli_text(id),
               cli_text(nid));
    pl_outcome *o = NULL;
    double t0 = now_ms();
    st = pl_run_continue(&o, t->engine, nid, NULL);
    double ms = now_ms() - t0;
    char note[PL_MAX_RUN_ID + 32];
    snprintf(note, sizeof note, "(the upgrade of %s)", id);
    if (st)
        report_refused(t, nid, st, refused_code(st));
    else
        report_outcome(t, o, ms, note);
    pl_outcome_free(o);
    repeat_ctx rc = {&p, nid, t->opt.json};
    if (pl_run_walk(t->engine, nid, mark_repeats, &rc))
        cli_error("warning: run %s: cannot read which calls it repeated: %s",
                  nid, pl_errmsg());
    if (j) {
        cJSON_AddStringToObject(j, "upgrade", "superseded");
        cJSON_AddStringToObject(j, "successor", nid);
        cJSON_AddItemToObject(j, "plan", json_plan(&p));
    }
    free(nid);
    plan_free(&p);
    return 1;
}

/* --all-diverged's last words: the runs it looked at, those that replay,
 * those that diverged, and those refused (a run newer code recorded, one
 * whose check or upgrade failed), each with its status, so the counts add
 * up; --json: the summary {runs, replay, diverged, refused: [{run_id,
 * error}]}. */
static void upgrade_summary(tool *t, size_t n, unsigned replay,
                            unsigned diverged, const id_list *refused,
                            const int *why)
{
    if (!t->opt.json) {
        printf("%zu run(s) not final or failed: %u replay under the loaded "
               "code, %u diverged%s",
               n, replay, diverged,
               !diverged        ? ""
               : t->opt.dry_run ? " (dry run: nothing written)"
                                : " and were upgraded");
        if (refused->n)
            printf(", %zu refused", refused->n);
        print_refused(refused, why);
        printf("%s\n", t->damaged.n
                           ? ", and runs whose record cannot be read (above)"
                           : "");
        return;
    }
    cJSON *sum = cJSON_CreateObject(), *list = json_refused(refused, why);
    bool ok = sum && list && cli_json_add_int(sum, "runs", (int64_t)n) &&
              cli_json_add_int(sum, "replay", replay) &&
              cli_json_add_int(sum, "diverged", diverged);
    if (ok && cJSON_AddItemToObject(sum, "refused", list))
        list = NULL;
    else
        ok = false;
    cJSON_Delete(list);
    set_summary(t, sum, ok);
}

/* --all-diverged: every run not final, and every failed run; a run whose
 * record cannot be read is passed over. */
typedef struct candidates {
    tool *t;
    id_list ids;
} candidates;

static int skip_damaged(const char *id, const char *msg, void *user)
{
    return report_damaged(((candidates *)user)->t, id, msg);
}

static int visit_candidate(const pl_run_info *info, void *user)
{
    id_list *l = &((candidates *)user)->ids;
    bool candidate = is_live(info->status) || info->status == PL_RUN_FAILED;
    if (!candidate || info->owner_alive)
        return 0;
    return ids_push(l, info->id) ? 0 : PL_ENOMEM;
}

void mode_upgrade(tool *t)
{
    if (t->opt.run) {
        if (!need_run(t, t->opt.run))
            (void)upgrade_one(t, t->opt.run, true);
        return;
    }
    candidates cand = {t, {0}};
    int st = cli_runs_each(t->engine, NULL, visit_candidate, skip_damaged,
                           &cand);
    id_list ids = cand.ids;
    if (st) {
        cli_error("reading the runs of %s: %s (%s)",
                  QUOTE(cli_store_shown(t->opt.store)),
                  st == PL_ENOMEM ? "out of memory" : pl_errmsg(),
                  pl_status_name(st));
        worst(t, EXIT_OPEN);
    }
    unsigned replay = 0, diverged = 0;
    id_list refused = {0}; /* the runs neither upgraded nor replaying */
    int *why = calloc(ids.n ? ids.n : 1, sizeof *why); /* each one's status */
    for (size_t i = 0; !st && why && i < ids.n; i++) {
        int r = upgrade_one(t, ids.v[i], false);
        replay += r == 0;
        diverged += r == 1;
        if (r < 0) {
            why[refused.n] = t->refused_st; /* each refusal sets it */
            if (!ids_push(&refused, ids.v[i]))
                t->w.oom = true;
        }
    }
    if (!why)
        t->w.oom = true;
    else if (!st)
        upgrade_summary(t, ids.n, replay, diverged, &refused, why);
    free(why);
    ids_free(&refused);
    ids_free(&ids);
}
