/*
 * test_import_inbox.c -- pl_run_export and pl_run_import of a waiting run:
 * its inbox travels with it, a changed inbox is refused, and an export of
 * format 1 (before inboxes) still imports.  test_import.c has the rest.
 */
#include "support_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a waiting run and its inbox ------------------------------------------------ */

static void signal_only(pl_engine *e, const char *id, const char *name,
                        const char *json)
{
    cJSON *p = t_json(json);
    cr_assert_eq(pl_run_signal(NULL, e, id, name, p), PL_OK, "%s", pl_errmsg());
    cJSON_Delete(p);
}

static size_t count_in(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* A run waiting for "go" in @p e, given "go" and "more" that it has not
 * consumed yet: its export, as text. */
static char *waiting_export(pl_engine *e)
{
    cr_assert_eq(pl_engine_set_wait_in_place(e, 0), PL_OK);
    pl_outcome *o = t_start(e, "waits", "{\"ms\":600000}", "w");
    cr_assert_eq(o->status, PL_RUN_WAITING);
    pl_outcome_free(o);
    signal_only(e, "w", "go", "{\"n\":7}");
    signal_only(e, "w", "more", "{\"m\":8}");
    return export_text(e, "w");
}

/*
 * A waiting run exported with the events delivered to it and not yet
 * consumed is imported waiting, with them in its inbox: continued there,
 * it consumes them as it would have where it came from.
 */
Test(import, a_waiting_run_keeps_its_inbox)
{
    pl_registry *reg = registry();
    pl_engine *a = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_engine *b = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    char *text = waiting_export(a);
    cr_expect_eq(count_in(text, "\"kind\":\"inbox\""), 2, "%s", text);
    cr_expect_eq(count_in(text, "\"inbox\":2"), 1);
    char *id = NULL;
    cr_assert_eq(import_text(b, text, NULL, &id), PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(id, "w");
    pl_run_info *ri = NULL;
    cr_assert_eq(pl_run_get(&ri, b, "w"), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(ri->status, PL_RUN_WAITING);
    cr_expect_str_eq(ri->wait_event, "go");
    pl_run_info_free(ri);
    /* its export from the new store is the same run, inbox and all */
    char *again = export_text(b, "w");
    cr_expect_eq(count_in(again, "\"kind\":\"inbox\""), 2);
    free(again);
    /* a waiting run with an inbox is due: a wake continues it */
    int64_t next = 0;
    cr_assert_eq(pl_engine_set_wait_in_place(b, 0), PL_OK);
    cr_assert_eq(pl_engine_wake(b, &next), PL_OK, "%s", pl_errmsg());
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, b, "w", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    char *r = t_text(pl_outcome_result(o));
    cr_expect_str_eq(r, "{\"go\":{\"n\":7},\"more\":{\"m\":8}}");
    free(r);
    pl_outcome_free(o);
    cr_expect_eq(pl_run_verify(b, "w"), PL_OK, "%s", pl_errmsg());
    again = export_text(b, "w");
    cr_expect_eq(count_in(again, "\"kind\":\"inbox\""), 0, "consumed");
    free(again);
    /* the same export under a new id, in the same store: bound to it */
    free(id);
    id = NULL;
    cr_assert_eq(import_text(b, text, "w2", &id), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_continue(&o, b, "w2", NULL), PL_OK, "%s", pl_errmsg());
    cr_expect_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    free(id);
    free(text);
    pl_engine_close(a);
    pl_engine_close(b);
    pl_registry_free(reg);
    t_cleanup();
}

/* An export's inbox lines changed, dropped, moved or miscounted: refused,
 * nothing written. */
Test(import_refuses, a_changed_inbox)
{
    tamper_fixture f = {0};
    f.reg = registry();
    f.a = t_engine(t_store_path(), f.reg, PL_DURABILITY_PROCESS);
    f.b = t_engine(t_store_path(), f.reg, PL_DURABILITY_PROCESS);
    f.text = waiting_export(f.a);
    f.l = split(f.text);
    size_t go = f.l.n - 2, more = f.l.n - 1;
    cr_assert(strstr(f.l.v[go], "\"kind\":\"inbox\""));
    char *keep = text_dup(f.l.v[go]);
    edit(&f.l, go, "\"n\":7", "\"n\":6");
    refused_lines(&f, PL_ECORRUPT, "does not match its record");
    free(f.l.v[go]);
    f.l.v[go] = text_dup(keep);
    flip_hex(&f.l, go, "record", 10);
    refused_lines(&f, PL_ECORRUPT, "does not decode");
    free(f.l.v[go]);
    f.l.v[go] = text_dup(keep);
    edit(&f.l, go, "\"seq\":1", "\"seq\":3");
    refused_lines(&f, PL_EJSON, "seq");
    free(f.l.v[go]);
    f.l.v[go] = text_dup(keep);
    /* a record that is not hex (once leaked what was decoded of it) */
    edit(&f.l, go, "\"record\":\"", "\"record\":\"00zz");
    refused_lines(&f, PL_EJSON, "record");
    free(f.l.v[go]);
    f.l.v[go] = text_dup(keep);
    /* the last line dropped: truncated */
    char *last = f.l.v[more];
    f.l.n--;
    refused_lines(&f, PL_ECORRUPT, "truncated");
    /* a step after an inbox line */
    f.l.v[more] = f.l.v[go];
    f.l.v[go] = f.l.v[go - 1];
    f.l.v[go - 1] = f.l.v[more];
    f.l.v[more] = last;
    f.l.n++;
    refused_lines(&f, PL_ECORRUPT, "a step after the inbox lines");
    char *t = f.l.v[go - 1]; /* back in order */
    f.l.v[go - 1] = f.l.v[go];
    f.l.v[go] = t;
    edit(&f.l, 0, "\"inbox\":2", "\"inbox\":1");
    refused_lines(&f, PL_ECORRUPT, "more inbox lines");
    edit(&f.l, 0, "\"inbox\":1", "\"inbox\":3");
    refused_lines(&f, PL_ECORRUPT, "truncated");
    free(keep);
    tamper_teardown(&f);
}

/* An export of format 1, made before inbox lines, is read as before. */
Test(import, an_export_of_format_1_imports)
{
    tamper_fixture f;
    tamper_setup(&f);
    edit(&f.l, 0, "\"format\":2", "\"format\":1");
    edit(&f.l, 0, ",\"inbox\":0", "");
    char *t = join(&f.l), *id = NULL;
    cr_assert_eq(import_text(f.b, t, NULL, &id), PL_OK, "%s", pl_errmsg());
    cr_expect_str_eq(id, "old");
    cr_expect_eq(pl_run_verify(f.b, "old"), PL_OK, "%s", pl_errmsg());
    free(id);
    free(t);
    tamper_teardown(&f);
}
