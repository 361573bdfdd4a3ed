/* The crash matrices' shared boundaries, reference run, children and checks. */
#include "support_crash.h"

const char *const tool_names[N_TOOLS] = {"reserve_stock", "charge_card",
                                         "ship"};

void on_event(const pl_event *ev, void *user)
{
    recorder *r = user;
    if ((ev->kind == PL_EVENT_CALL_STARTED ||
         ev->kind == PL_EVENT_CALL_SERVED) &&
        ev->path && strcmp(ev->path, "0") == 0) {
        if (r->n_calls < MAX_CALLS) {
            call_info *c = &r->calls[r->n_calls++];
            memset(c, 0, sizeof *c);
            snprintf(c->tool, sizeof c->tool, "%s",
                     ev->policy ? ev->policy : "?");
            c->seq = ev->seq;
            c->executed = ev->kind == PL_EVENT_CALL_STARTED;
        } else {
            r->overflow = true;
        }
    }
    if (ev->kind != PL_EVENT_STEP_APPENDED && ev->kind != PL_EVENT_COMMIT)
        return;
    r->n++;
    if (r->n <= MAX_BOUNDARIES) {
        boundary *b = &r->b[r->n];
        b->kind = ev->kind;
        snprintf(b->path, sizeof b->path, "%s", ev->path ? ev->path : "");
        b->seq = ev->seq;
        b->type = ev->step_type;
    } else {
        r->overflow = true;
    }
    if (r->kill_at > 0 && r->n == r->kill_at)
        raise(SIGKILL);
}

int collect_row(const pl_step *s, void *user)
{
    rows *l = user;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        step_row *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return PL_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    step_row *row = &l->v[l->n++];
    row->id = strdup(pl_step_id(s));
    row->type = pl_step_type_of(s);
    row->actor = strdup(pl_step_actor(s));
    row->payload = t_text(pl_step_payload(s));
    return row->id && row->actor && row->payload ? 0 : PL_ENOMEM;
}

void rows_free(rows *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].id);
        free(l->v[i].actor);
        free(l->v[i].payload);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

void expect_same_ledgers(const rows *got, const rows *want, const char *what)
{
    cr_assert_eq(got->n, want->n, "%s: %zu steps, the reference has %zu", what,
                 got->n, want->n);
    for (size_t i = 0; i < want->n; i++) {
        const step_row *g = &got->v[i], *w = &want->v[i];
        cr_assert_str_eq(g->id, w->id, "%s: step %zu", what, i);
        cr_assert_eq(g->type, w->type, "%s: step %s type", what, w->id);
        cr_assert_str_eq(g->actor, w->actor, "%s: step %s actor", what, w->id);
        cr_assert_str_eq(g->payload, w->payload, "%s: step %s payload", what,
                         w->id);
    }
}

pl_registry *order_registry(const char *effects_path)
{
    pl_registry *reg = NULL;
    cr_assert_eq(pl_registry_new(&reg), PL_OK);
    cr_assert_eq(order_register(reg, effects_path), PL_OK, "%s", pl_errmsg());
    return reg;
}

void place_make(place *p, const char *base, const char *name)
{
    snprintf(p->dir, sizeof p->dir, "%s/%s", base, name);
    t_store_in(p->store, sizeof p->store, p->dir, "store.db");
    snprintf(p->fx, sizeof p->fx, "%s/effects", p->dir);
    cr_assert_eq(mkdir(p->dir, 0700), 0, "mkdir %s: %s", p->dir,
                 strerror(errno));
}
