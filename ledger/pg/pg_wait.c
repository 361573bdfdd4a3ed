/*
 * pg_wait.c -- every statement waits for the server's answer with a bound
 * of its own (the URI's answer_timeout_ms, pg_uri.c): a server that
 * accepted the connection and then stopped answering (its processes
 * stopped, a network path that drops packets, a backend stuck) fails the
 * call with PL_ESTORE instead of hanging it.  Connections are in libpq's
 * non-blocking mode: a statement is sent, then flushed and its answer read
 * as the socket allows, until the answer or the bound.  At the bound the
 * connection is cut (its state is unknown) and its statement cancelled:
 * it counts as lost, pl__pg_conn_put() drops it, and the engine treats the
 * call as it treats a server that went away (a commit in flight has an
 * unknown outcome, and the next call reconnects).
 *
 * The cancel: a backend whose client is gone goes on with its statement
 * (and holds its row locks) until it next writes to the socket or a
 * keepalive fails, which may be long after (a statement waiting for a
 * lock, a slow one).  So with the cut a cancel request goes to the
 * server (PQcancel(), libpq's signal-safe one, on a connection of its
 * own).  libpq 15's PQcancel() waits for the server to close that
 * connection, and a server that stopped answering never does: it runs in
 * a child process that is killed past CANCEL_MS (or answer_timeout_ms, if
 * shorter), so a stalled server delays the call's failure by that at most
 * (pl__child_errand(), platform.c).  A request that was sent is served
 * when the server runs again.
 */
#include "pg_int.h"
#include "platform.h"

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

/* the longest a cancel request may take (see above) */
#define CANCEL_MS 1000

static void send_cancel(void *arg)
{
    char err[256]; /* a failed cancel changes nothing: the cut follows */
    (void)PQcancel(arg, err, sizeof err);
}

/* Cut @p c: shut its socket, and let libpq find it closed, so that the
 * connection is CONNECTION_BAD from now on; then cancel its statement
 * (after, so that the error a cancel makes the server send is not read
 * as the statement's answer). */
static void cut(const pl__pg_store *s, PGconn *c)
{
    PGcancel *k = PQgetCancel(c);
    t_stalled = c;
    int fd = PQsocket(c);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    (void)PQconsumeInput(c);
    if (k) {
        int ms = s->answer_ms < CANCEL_MS ? s->answer_ms : CANCEL_MS;
        (void)pl__child_errand(send_cancel, k, (unsigned)ms);
        PQfreeCancel(k);
    }
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
    cut(s, c);
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
