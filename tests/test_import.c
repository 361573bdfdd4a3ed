/*
 * test_import.c -- pl_run_export and pl_run_import (core/ops/export.c): a run
 * as JSON lines, and back into a store.
 *
 * The root policy "outer" calls "chain" (whose callee ledger holds calls of
 * its own and ends in a mirror of its result) and then "echo" (a folded
 * one-step callee), so an export holds steps of every shape.  Covers round
 * trips of completed, suspended (resumed after the import), failed and
 * running runs, into another store and into the same one under a new id;
 * and every change to an export refused with the step named and nothing
 * written.
 * test_import_inbox.c: a waiting run and its inbox; support_import.c:
 * what they share.
 */
#include "support_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- round trips -------------------------------------------------------------- */

Test(import, a_completed_run_round_trips_into_another_store)
{
    pl_registry *reg = registry();
    pl_engine *a = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_engine *b = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    completed_run(a);
    /* a second run, so the imported run's number differs from the source */
    pl_outcome *o = t_start(b, "outer", "{}", "other");
    pl_outcome_free(o);
    char *text = export_text(a, "old");
    /* the export names the folded callee as derived and a mirror's record */
    cr_assert(strstr(text, "\"derived\":true"));
    cr_assert(strstr(text, "\"kind\":\"run\""));
    char *id = NULL;
    /* with no engine, only checked: the id it would take, nothing written */
    cr_assert_eq(import_text(NULL, text, NULL, &id), PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(id, "old");
    free(id);
    id = NULL;
    cr_assert_eq(import_text(NULL, text, "new", &id), PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(id, "new");
    free(id);
    id = NULL;
    pl_run_info *none = NULL;
    cr_assert_eq(pl_run_get(&none, b, "old"), PL_ENOTFOUND);
    cr_assert_eq(import_text(b, text, NULL, &id), PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(id, "old");
    cr_assert_eq(pl_run_verify(b, "old"), PL_OK, "%s", pl_errmsg());
    pl_run_info *ia = NULL, *ib = NULL;
    cr_assert_eq(pl_run_get(&ia, a, "old"), PL_OK);
    cr_assert_eq(pl_run_get(&ib, b, "old"), PL_OK);
    cr_assert_eq(ib->status, PL_RUN_COMPLETED);
    cr_assert_eq(ib->steps, ia->steps);
    cr_assert_eq(ib->created_us, ia->created_us);
    cr_assert_str_eq(ib->policy, ia->policy);
    cr_assert(cJSON_Compare(ib->payload, ia->payload, 1));
    pl_run_info_free(ia);
    pl_run_info_free(ib);
    checks_clean(b, "old");
    /* the imported run exports as the same steps, its hashes its own */
    char *again = export_text(b, "old");
    lines x = split(text), y = split(again);
    cr_assert_eq(x.n, y.n);
    for (size_t i = 1; i < x.n; i++) {
        cJSON *p = cJSON_Parse(x.v[i]), *q = cJSON_Parse(y.v[i]);
        cr_assert(p && q);
        for (const char *const *f =
                 (const char *const[]){"id", "actor", "type", "payload",
                                       "time_us", "code", NULL};
             *f; f++)
            cr_assert(cJSON_Compare(cJSON_GetObjectItem(p, *f),
                                    cJSON_GetObjectItem(q, *f), 1),
                      "line %zu, field %s", i, *f);
        cJSON_Delete(p);
        cJSON_Delete(q);
    }
    free_lines(&x);
    free_lines(&y);
    free(again);
    free(id);
    free(text);
    pl_engine_close(a);
    pl_engine_close(b);
    pl_registry_free(reg);
    t_cleanup();
}

/* A payload's string (or member name) need not be UTF-8: cJSON keeps any
 * bytes.  The export is JSON text, UTF-8, so such a byte is written as
 * U+FFFD; the import takes that for the byte, whose record it restores. */
Test(import, bytes_that_are_not_utf8_export_as_utf8_and_import_whole)
{
    pl_registry *reg = registry();
    pl_engine *a = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_engine *b = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(a, "echo",
                            "{\"k\xff\": \"v\xfe\xc3\", \"ok\": \"\xc3\xa9\"}",
                            "raw");
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    pl_outcome_free(o);
    char *text = export_text(a, "raw");
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        cr_assert(*p != 0xff && *p != 0xfe && (*p != 0xc3 || p[1] == 0xa9),
                  "a byte that is not UTF-8 in the export: %s", text);
    cr_assert(strstr(text, "\"k\xef\xbf\xbd\""), "%s", text);
    cr_assert(strstr(text, "\"v\xef\xbf\xbd\xef\xbf\xbd\""), "%s", text);
    char *id = NULL;
    cr_assert_eq(import_text(b, text, NULL, &id), PL_OK, "%s", pl_errmsg());
    pl_run_info *ia = NULL, *ib = NULL;
    cr_assert_eq(pl_run_get(&ia, a, "raw"), PL_OK);
    cr_assert_eq(pl_run_get(&ib, b, "raw"), PL_OK);
    cr_assert(cJSON_Compare(ib->payload, ia->payload, 1)); /* the bytes */
    cr_assert_eq(pl_run_verify(b, "raw"), PL_OK, "%s", pl_errmsg());
    pl_run_info_free(ia);
    pl_run_info_free(ib);
    /* a change is still refused */
    lines l = split(text);
    edit(&l, line_of(&l, "0:0"), "\"v\xef\xbf\xbd", "\"w\xef\xbf\xbd");
    char *changed = join(&l);
    free(id);
    id = NULL;
    cr_assert_eq(import_text(b, changed, "raw2", &id), PL_ECORRUPT);
    cr_assert(strstr(pl_errmsg(), "payload"), "%s", pl_errmsg());
    free(changed);
    free_lines(&l);
    free(text);
    pl_engine_close(a);
    pl_engine_close(b);
    pl_registry_free(reg);
    t_cleanup();
}

Test(import, a_run_imports_into_its_own_store_under_a_new_id)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    completed_run(e);
    char *text = export_text(e, "old");
    char *id = NULL;
    cr_assert_eq(import_text(e, text, "copy", &id), PL_OK, "%s", pl_errmsg());
    cr_assert_str_eq(id, "copy");
    cr_assert_eq(pl_run_verify(e, "copy"), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_verify(e, "old"), PL_OK, "%s", pl_errmsg());
    checks_clean(e, "copy");
    uint8_t h1[PL_HASH_LEN], h2[PL_HASH_LEN];
    cr_assert_eq(pl_run_head(h1, e, "old"), PL_OK);
    cr_assert_eq(pl_run_head(h2, e, "copy"), PL_OK);
    cr_assert_arr_neq(h1, h2, PL_HASH_LEN); /* its own number and id */
    /* the id is taken now: a second import is refused, nothing written */
    free(id);
    id = NULL;
    size_t runs = run_count(e);
    cr_assert_eq(import_text(e, text, "copy", &id), PL_EEXIST);
    cr_assert_null(id);
    cr_assert(strstr(pl_errmsg(), "exists already"), "%s", pl_errmsg());
    cr_assert_eq(import_text(e, text, NULL, &id), PL_EEXIST);
    cr_assert_eq(run_count(e), runs);
    free(text);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}

Test(import, a_suspended_run_is_resumed_after_its_import)
{
    pl_registry *reg = registry();
    pl_engine *a = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_engine *b = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(a, "ask", "{}", "asked");
    cr_assert_eq(o->status, PL_RUN_SUSPENDED);
    char *text = export_text(a, "asked");
    char *id = NULL;
    cr_assert_eq(import_text(b, text, NULL, &id), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_verify(b, "asked"), PL_OK, "%s", pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, b, "asked"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_SUSPENDED);
    cr_assert_str_eq(info->resume_token, o->resume_token);
    cr_assert_str_eq(info->suspended_path, o->suspended_path);
    pl_run_info_free(info);
    int echoes = t_calls.echo;
    cJSON *answer = t_json("{\"yes\": true}");
    pl_outcome *done = NULL;
    cr_assert_eq(pl_run_resume(&done, b, "asked", o->resume_token, answer),
                 PL_OK, "%s", pl_errmsg());
    cr_assert_eq(done->status, PL_RUN_COMPLETED);
    cr_assert_eq(t_calls.echo, echoes);
    cr_assert_eq(pl_run_verify(b, "asked"), PL_OK, "%s", pl_errmsg());
    /* the source still waits */
    cr_assert_eq(pl_run_get(&info, a, "asked"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_SUSPENDED);
    pl_run_info_free(info);
    cJSON_Delete(answer);
    pl_outcome_free(done);
    pl_outcome_free(o);
    free(id);
    free(text);
    pl_engine_close(a);
    pl_engine_close(b);
    pl_registry_free(reg);
    t_cleanup();
}

Test(import, a_failed_run_keeps_its_reason)
{
    pl_registry *reg = registry();
    pl_engine *a = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_engine *b = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_outcome *o = t_start(a, "breaks", "{}", "broke");
    cr_assert_eq(o->status, PL_RUN_FAILED);
    pl_outcome_free(o);
    char *text = export_text(a, "broke");
    char *id = NULL;
    cr_assert_eq(import_text(b, text, "broke2", &id), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_run_verify(b, "broke2"), PL_OK, "%s", pl_errmsg());
    pl_run_info *ia = NULL, *ib = NULL;
    cr_assert_eq(pl_run_get(&ia, a, "broke"), PL_OK);
    cr_assert_eq(pl_run_get(&ib, b, "broke2"), PL_OK);
    cr_assert_eq(ib->status, PL_RUN_FAILED);
    cr_assert_eq(ib->error, ia->error);
    cr_assert_str_eq(ib->reason, ia->reason);
    pl_run_info_free(ia);
    pl_run_info_free(ib);
    free(id);
    free(text);
    pl_engine_close(a);
    pl_engine_close(b);
    pl_registry_free(reg);
    t_cleanup();
}

Test(import, a_running_run_is_imported_ownerless_and_finished)
{
    pl_registry *reg = registry();
    pl_engine *a = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_engine *b = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    completed_run(a);
    /* a fork is left running with no owner: what a crash leaves */
    char *fid = NULL;
    cr_assert_eq(pl_run_fork(&fid, a, "old", "0:2", "forked"), PL_OK, "%s",
                 pl_errmsg());
    free(fid);
    char *text = export_text(a, "forked");
    cr_assert(strstr(text, "\"status\":\"running\""));
    char *id = NULL;
    cr_assert_eq(import_text(b, text, NULL, &id), PL_OK, "%s", pl_errmsg());
    pl_run_info *info = NULL;
    cr_assert_eq(pl_run_get(&info, b, "forked"), PL_OK);
    cr_assert_eq(info->status, PL_RUN_RUNNING);
    cr_assert(!info->owner_alive);
    pl_run_info_free(info);
    cr_assert_eq(pl_run_verify(b, "forked"), PL_OK, "%s", pl_errmsg());
    int chains = t_calls.chain;
    pl_outcome *o = NULL;
    cr_assert_eq(pl_run_continue(&o, b, "forked", NULL), PL_OK, "%s",
                 pl_errmsg());
    cr_assert_eq(o->status, PL_RUN_COMPLETED);
    cr_assert_eq(t_calls.chain, chains); /* served from the import */
    cr_assert_eq(pl_run_verify(b, "forked"), PL_OK, "%s", pl_errmsg());
    pl_outcome_free(o);
    free(id);
    free(text);
    pl_engine_close(a);
    pl_engine_close(b);
    pl_registry_free(reg);
    t_cleanup();
}

/* A running run imported where nobody asks for it by id (ledger-replay
 * --import, then workers) is taken by a worker, as a queued one is: it
 * was made with no lease, so no worker ever took it. */
Test(import, a_running_run_imported_is_taken_by_a_worker)
{
    pl_registry *reg = registry();
    pl_engine *a = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    pl_engine *b = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    completed_run(a);
    char *fid = NULL;
    cr_assert_eq(pl_run_fork(&fid, a, "old", "0:2", "forked"), PL_OK, "%s",
                 pl_errmsg());
    free(fid);
    char *text = export_text(a, "forked");
    cr_assert(strstr(text, "\"status\":\"running\""));
    char *id = NULL;
    cr_assert_eq(import_text(b, text, NULL, &id), PL_OK, "%s", pl_errmsg());
    int chains = t_calls.chain;
    t_worker w;
    t_worker_start(&w, b, 1);
    /* a bound, not a timing: the worker takes it at its first look */
    for (int i = 0; i < 6000 && status_of(b, "forked") != PL_RUN_COMPLETED; i++)
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    t_worker_stop(&w);
    cr_assert_eq(status_of(b, "forked"), PL_RUN_COMPLETED, "%s",
                 pl_run_status_name(status_of(b, "forked")));
    cr_assert_eq(t_calls.chain, chains); /* served from the import */
    cr_assert_eq(pl_run_verify(b, "forked"), PL_OK, "%s", pl_errmsg());
    free(id);
    free(text);
    pl_engine_close(a);
    pl_engine_close(b);
    pl_registry_free(reg);
    t_cleanup();
}

/* ---- refusals ----------------------------------------------------------------- */

Test(import_refuses, a_changed_payload)
{
    tamper_fixture f;
    tamper_setup(&f);
    size_t i = line_of(&f.l, "0:0");
    edit(&f.l, i, "\"n\":3", "\"n\":4");
    refused_lines(&f, PL_ECORRUPT, "step 0:0: \"payload\" does not match");
    tamper_teardown(&f);
}

Test(import_refuses, a_changed_hash)
{
    tamper_fixture f;
    tamper_setup(&f);
    flip_hex(&f.l, line_of(&f.l, "0.0:1"), "hash", 5);
    refused_lines(&f, PL_ECORRUPT,
                  "step 0.0:1: hash does not match its "
                  "record: the export was changed");
    tamper_teardown(&f);
}

Test(import_refuses, a_changed_record_byte)
{
    tamper_fixture f;
    tamper_setup(&f);
    flip_hex(&f.l, line_of(&f.l, "0:1"), "record", 3);
    refused_lines(&f, PL_ECORRUPT, "step 0:1:");
    tamper_teardown(&f);
}

Test(import_refuses, a_record_moved_to_another_step)
{
    /* step 0:2's record under step 0:3's key: the record names its seq */
    tamper_fixture f;
    tamper_setup(&f);
    size_t i = line_of(&f.l, "0:2"), j = line_of(&f.l, "0:3");
    cJSON *from = cJSON_Parse(f.l.v[i]), *to = cJSON_Parse(f.l.v[j]);
    cr_assert(from && to);
    cJSON_ReplaceItemInObject(
        to, "record", cJSON_Duplicate(cJSON_GetObjectItem(from, "record"), 1));
    free(f.l.v[j]);
    f.l.v[j] = cJSON_PrintUnformatted(to);
    cJSON_Delete(from);
    cJSON_Delete(to);
    refused_lines(&f, PL_ECORRUPT, "step 0:3: its record is of another step");
    tamper_teardown(&f);
}

Test(import_refuses, a_dropped_line)
{
    tamper_fixture f;
    tamper_setup(&f);
    size_t i = line_of(&f.l, "0.0:2");
    free(f.l.v[i]);
    memmove(&f.l.v[i], &f.l.v[i + 1], (f.l.n - i - 1) * sizeof *f.l.v);
    f.l.n--;
    refused_lines(&f, PL_ECORRUPT,
                  "step 0.0:3: its previous-step hash does not match");
    tamper_teardown(&f);
}

Test(import_refuses, a_dropped_last_line)
{
    tamper_fixture f;
    tamper_setup(&f);
    free(f.l.v[--f.l.n]);
    refused_lines(&f, PL_ECORRUPT, "it is truncated");
    tamper_teardown(&f);
}

Test(import_refuses, a_dropped_callee_tail)
{
    /* the last step of a callee ledger gone: its caller's result's link
     * names the ledger */
    tamper_fixture f;
    tamper_setup(&f);
    size_t i = line_of(&f.l, "0:1") - 1; /* the callee's last step */
    free(f.l.v[i]);
    memmove(&f.l.v[i], &f.l.v[i + 1], (f.l.n - i - 1) * sizeof *f.l.v);
    f.l.n--;
    refused_lines(&f, PL_ECORRUPT,
                  "step 0:1: its link does not match the "
                  "last step of ledger 0.0");
    tamper_teardown(&f);
}

Test(import_refuses, a_duplicated_line)
{
    tamper_fixture f;
    tamper_setup(&f);
    size_t i = line_of(&f.l, "0.0:1");
    f.l.v = realloc(f.l.v, (f.l.n + 1) * sizeof *f.l.v);
    cr_assert(f.l.v);
    memmove(&f.l.v[i + 1], &f.l.v[i], (f.l.n - i) * sizeof *f.l.v);
    f.l.v[i + 1] = text_dup(f.l.v[i]);
    f.l.n++;
    refused_lines(&f, PL_ECORRUPT, "step 0.0:1: a duplicate");
    tamper_teardown(&f);
}

Test(import_refuses, a_reordered_line)
{
    tamper_fixture f;
    tamper_setup(&f);
    size_t i = line_of(&f.l, "0:1"), j = line_of(&f.l, "0:2");
    cr_assert_eq(j, i + 1);
    char *t = f.l.v[i];
    f.l.v[i] = f.l.v[j];
    f.l.v[j] = t;
    /* 0:2 now follows 0.0:6, not 0:1 */
    refused_lines(&f, PL_ECORRUPT,
                  "step 0:2: its previous-step hash does not match");
    f.l.v[j] = f.l.v[i];
    f.l.v[i] = t;
    /* a callee's first step before its call: each chains, the order not */
    i = line_of(&f.l, "0:0");
    j = line_of(&f.l, "0.0:0");
    cr_assert_eq(j, i + 1);
    t = f.l.v[i];
    f.l.v[i] = f.l.v[j];
    f.l.v[j] = t;
    refused_lines(&f, PL_ECORRUPT, "step 0:0: out of order");
    tamper_teardown(&f);
}

Test(import_refuses, a_truncated_file)
{
    tamper_fixture f;
    tamper_setup(&f);
    size_t n = strlen(f.text);
    for (size_t cut = n - 1; cut > n - 40; cut -= 7) {
        char *t = text_dup(f.text);
        t[cut] = '\0';
        refused(&f, t, PL_EJSON, "truncated");
        free(t);
    }
    /* cut inside the first line */
    char *t = text_dup(f.text);
    t[20] = '\0';
    refused(&f, t, PL_EJSON, "line 1:");
    free(t);
    refused(&f, "", PL_EJSON, "empty");
    tamper_teardown(&f);
}

Test(import_refuses, malformed_lines)
{
    tamper_fixture f;
    tamper_setup(&f);
    size_t i = line_of(&f.l, "0:1");
    char line[32];
    snprintf(line, sizeof line, "line %zu:", i + 1);
    char *keep = f.l.v[i];
    static const char *const bad[] = {
        "{not json",
        "[1,2]",
        "{}",
        "null",
        "{\"run\":\"old\",\"path\":\"0\",\"seq\":\"1\"}",
        "{\"run\":\"old\",\"path\":\"x\",\"seq\":1}"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        f.l.v[i] = (char *)bad[k];
        refused_lines(&f, PL_EJSON, line);
    }
    f.l.v[i] = keep;
    /* a field of the wrong type */
    edit(&f.l, i, "\"seq\":1", "\"seq\":1.5");
    refused_lines(&f, PL_EJSON, "\"seq\"");
    tamper_teardown(&f);
}

Test(import_refuses, a_changed_run_line)
{
    tamper_fixture f;
    tamper_setup(&f);
    char *keep = text_dup(f.l.v[0]);
    edit(&f.l, 0, "\"status\":\"completed\"", "\"status\":\"failed\"");
    refused_lines(&f, PL_ECORRUPT, "line 1:");
    free(f.l.v[0]);
    f.l.v[0] = text_dup(keep);
    flip_hex(&f.l, 0, "state", 40);
    refused_lines(&f, PL_ECORRUPT, "state record");
    free(f.l.v[0]);
    f.l.v[0] = text_dup(keep);
    /* an info record that is not hex (once leaked what was decoded) */
    edit(&f.l, 0, "\"info\":\"", "\"info\":\"00zz");
    refused_lines(&f, PL_EJSON, "info");
    free(f.l.v[0]);
    f.l.v[0] = text_dup(keep);
    edit(&f.l, 0, "\"format\":2", "\"format\":3");
    refused_lines(&f, PL_EVERSION, "format");
    free(f.l.v[0]);
    f.l.v[0] = keep;
    /* another run number: every hash covers it */
    edit(&f.l, 0, "\"run_number\":1", "\"run_number\":2");
    refused_lines(&f, PL_ECORRUPT, "step 0:0: hash does not match");
    tamper_teardown(&f);
}

static int stop_at_second(cJSON *line, void *user)
{
    int *seen = user;
    cr_assert(cJSON_IsObject(line));
    return ++*seen == 2 ? PL_ELIMIT : 0;
}

static int stop_odd(cJSON *line, void *user)
{
    (void)line;
    (void)user;
    return 7;
}

Test(import, export_lines_go_to_a_visitor_that_may_stop)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    completed_run(e);
    int seen = 0;
    cr_assert_eq(pl_run_export_each(e, "old", stop_at_second, &seen),
                 PL_ELIMIT);
    cr_assert_eq(seen, 2);
    cr_assert_eq(pl_run_export_each(e, "old", stop_odd, NULL), PL_EINVAL);
    cr_assert(strstr(pl_errmsg(), "stopped"), "%s", pl_errmsg());
    cr_assert_eq(pl_run_export_each(e, "old", NULL, NULL), PL_EINVAL);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}

/* An export whose first line is a real run's and whose second is the
 * @p n bytes of @p line (its end included) is refused with PL_EJSON, a
 * message holding @p want, and no run made. */
static void second_line_refused(const char *line, size_t n, const char *want)
{
    tamper_fixture f;
    tamper_setup(&f);
    char path[4096];
    snprintf(path, sizeof path, "%s/nul.jsonl", t_tmpdir());
    FILE *w = fopen(path, "wb");
    cr_assert(w);
    fputs(f.l.v[0], w);
    fputc('\n', w);
    fwrite(line, 1, n, w);
    cr_assert_eq(fclose(w), 0);
    FILE *in = fopen(path, "rb");
    char *id = NULL;
    cr_assert_eq(pl_run_import(&id, f.b, in, NULL), PL_EJSON);
    cr_assert(strstr(pl_errmsg(), want), "%s", pl_errmsg());
    fclose(in);
    cr_assert_eq(run_count(f.b), 0);
    tamper_teardown(&f);
}

Test(import_refuses, a_line_with_a_nul_byte)
{
    second_line_refused("{\"a\":\0}\n", 8, "line 2: holds a NUL byte");
}

/* \u0000 would end the string there, cJSON's strings being C strings:
 * the step's payload imported cut, as if whole. */
Test(import_refuses, a_line_with_u0000_in_a_string)
{
    static const char line[] = "{\"payload\": {\"note\": \"ok\\u0000 and "
                               "more\"}}\n";
    second_line_refused(line, sizeof line - 1,
                        "line 2: the string at '/payload/note' holds \\u0000");
}

Test(import_refuses, bad_arguments)
{
    pl_registry *reg = registry();
    pl_engine *e = t_engine(t_store_path(), reg, PL_DURABILITY_PROCESS);
    char *id = NULL;
    FILE *f = tmpfile();
    cr_assert(f);
    cr_assert_eq(pl_run_import(NULL, e, f, NULL), PL_EINVAL);
    /* no engine: a check only, and an empty export is refused */
    cr_assert_eq(pl_run_import(&id, NULL, f, NULL), PL_EJSON);
    cr_assert_eq(pl_run_import(&id, e, NULL, NULL), PL_EINVAL);
    cr_assert_eq(pl_run_import(&id, e, f, "bad id"), PL_EINVAL);
    cr_assert_eq(pl_run_export(e, "nope", f), PL_ENOTFOUND);
    cr_assert_eq(pl_run_export(e, "old", NULL), PL_EINVAL);
    cr_assert_eq(pl_run_export(NULL, "old", f), PL_EINVAL);
    fclose(f);
    cr_assert_eq(run_count(e), 0);
    pl_engine_close(e);
    pl_registry_free(reg);
    t_cleanup();
}
