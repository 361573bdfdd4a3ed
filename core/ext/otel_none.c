/*
 * otel_none.c -- the OpenTelemetry exporter of a library built without
 * libcurl (PL_WITH_CURL=OFF), compiled instead of otel.c: none opens, and
 * the rest take none.
 */
#include <stddef.h>

#include <policyledger.h>

int pl_otel_open(pl_otel **out, const pl_otel_options *opts)
{
    (void)opts;
    if (out)
        *out = NULL;
    return pl_errorf(PL_EIO, "pl_otel_open: policyledger was built without "
                             "libcurl (PL_WITH_CURL=OFF): the OpenTelemetry "
                             "exporter is absent");
}

void pl_otel_event(const pl_event *event, void *otel)
{
    (void)event;
    (void)otel;
}

int pl_otel_stats(pl_otel_counts *out, const pl_otel *otel)
{
    (void)out;
    (void)otel;
    return pl_errorf(PL_EINVAL, "pl_otel_stats: NULL argument");
}

int pl_otel_flush(pl_otel *otel, unsigned timeout_ms)
{
    (void)otel;
    (void)timeout_ms;
    return pl_errorf(PL_EINVAL, "pl_otel_flush: NULL exporter");
}

int pl_otel_close(pl_otel *otel)
{
    (void)otel;
    return PL_OK;
}
