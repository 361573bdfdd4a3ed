/*
 * pg_wait.c -- every statement waits for the server's answer with a bound
 * of its own (the URI's answer_timeout_ms, pg_conn.c): a server that
 * accepted the connection and then stopped answering (its processes
 * stopped, a network path that drops packets, a backend stuck) fails the
 * call with PL_ESTORE instead of hanging it.  Connections are in libpq's
 * non-blocking mode: a statement is sent, then flushed and its answer read
 * as the socket allows, until the answer or the bound.  At the bound the
 * connection is cut (its state is unknown, and a cancel request would wait
 * on the same silent server): it counts as lost, pl__pg_conn_put() drops
 * it, and the engine treats the call as it treats a server that went away
 * (a commit in flight has an unknown outcome, and the next call
 * reconnects).
 */
#include "pg_int.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

/* The connection this thread cut at the bound last: pl__pg_err() says so.
 * Only while it is broken: a connection another thread opened later at the
 * same address (this one freed) is not the one cut. */
static _Thread_local const PGconn *t_stalled;

bool pl__pg_stalled(const PGconn *c)
{
    return c && c == t_stalled && pl__pg_lost(c);
}

void pl__pg_stall_forget(const PGconn *c)
{
    if (t_stalled == c)
        t_stalled = NULL;
}

/* Cut @p c: shut its socket, and let libpq find it closed, so that the
 * connection is CONNECTION_BAD from now on. */
static void cut(PGconn *c)
{
    t_stalled = c;
    int fd = PQsocket(c);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    (void)PQconsumeInput(c);
}

/* Wait until PQgetResult() will not block, at most s->answer_ms.  False:
 * the bound passed, and @p c was cut. */
static bool wait_ready(const pl__pg_store *s, PGconn *c)
{
    uint64_t end = pl__mono_ns() + (uint64_t)s->answer_ms * 1000000u;
    for (;;) {
        int f = PQflush(c);
        if (f < 0 || PQsocket(c) < 0 || !PQconsumeInput(c))
            return true; /* broken: PQgetResult() says how */
        if (f == 0 && !PQisBusy(c))
            return true;
        uint64_t now = pl__mono_ns();
        if (now >= end)
            break;
        struct pollfd p = {PQsocket(c), (short)(POLLIN | (f ? POLLOUT : 0)), 0};
        int ms = (int)((end - now + 999999u) / 1000000u);
        if (poll(&p, 1, ms) < 0 && errno != EINTR)
            return true;
    }
    cut(c);
    return false;
}

PGresult *pl__pg_next(const pl__pg_store *s, PGconn *c)
{
    if (pl__pg_stalled(c))
        return NULL;
    return wait_ready(s, c) ? PQgetResult(c) : NULL;
}

PGresult *pl__pg_last(const pl__pg_store *s, PGconn *c, int sent)
{
    if (!sent)
        return NULL;
    PGresult *last = NULL, *r;
    while ((r = pl__pg_next(s, c))) {
        PQclear(last);
        last = r;
    }
    if (pl__pg_stalled(c)) { /* an answer cut short is no answer */
        PQclear(last);
        return NULL;
    }
    return last;
}
