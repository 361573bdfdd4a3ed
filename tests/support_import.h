/*
 * support_import.h -- what the tests of pl_run_export and pl_run_import
 * (test_import*.c) share (support_import.c): the policies and their
 * registry, exports as text and as lines, and the checks of a run.
 */
#ifndef PL_TESTS_SUPPORT_IMPORT_H
#define PL_TESTS_SUPPORT_IMPORT_H

#include "support.h"

/* The lines of @p text (a copy each; caller frees with free_lines). */
typedef struct lines {
    char **v;
    size_t n;
} lines;

pl_registry *registry(void);
char *text_dup(const char *s);
char *export_text(pl_engine *e, const char *id);
int import_text(pl_engine *e, const char *text, const char *new_id, char **out);
size_t run_count(pl_engine *e);
lines split(const char *text);
char *join(const lines *l);
void free_lines(lines *l);
size_t line_of(const lines *l, const char *id);
void edit(lines *l, size_t i, const char *from, const char *to);
void flip_hex(lines *l, size_t i, const char *name, size_t back);
void completed_run(pl_engine *e);
void checks_clean(pl_engine *e, const char *id);

/* Two stores and an export, for the refusals. */
typedef struct tamper_fixture {
    pl_registry *reg;
    pl_engine *a, *b;
    char *text;
    lines l;
} tamper_fixture;
void tamper_setup(tamper_fixture *f);
void tamper_teardown(tamper_fixture *f);
void refused(tamper_fixture *f, const char *text, int want, const char *says);
void refused_lines(tamper_fixture *f, int want, const char *says);

#endif
