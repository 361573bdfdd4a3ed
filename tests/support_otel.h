/*
 * support_otel.h -- what the OpenTelemetry exporter's tests (test_otel*.c)
 * share: a loopback receiver (tests/llm_server.py, which logs every request
 * body), an exporter sending to it, and the spans it received.
 */
#ifndef PL_TESTS_SUPPORT_OTEL_H
#define PL_TESTS_SUPPORT_OTEL_H

#include "llm_support.h"

/* Start @p s answering every request with @p rest (a response object). */
void ot_receiver(t_server *s, const char *rest);
/* @p s's URL (a static buffer). */
const char *ot_endpoint(const t_server *s);
/* An exporter to @p url, flushing every 50 ms. */
pl_otel *ot_exporter(const char *url);
/* Every span the receiver got so far (caller frees): an array. */
cJSON *ot_spans(const t_server *s);
/* The attribute @p key of span @p sp: its typed value object, or NULL. */
const cJSON *ot_attr(const cJSON *sp, const char *key);
/* The string value of attribute @p key, or NULL. */
const char *ot_attr_s(const cJSON *sp, const char *key);
/* The span of @p run at @p path, the last one received; NULL if none. */
const cJSON *ot_span_at(const cJSON *spans, const char *run, const char *path);
/* Flush @p x, every span sent (or dropped) before it returns. */
void ot_flush(pl_otel *x);

#endif
