/*
 * pg_reopen.c -- a store open read-only while it was format 1 (single
 * rows alone: s->single, its reads of k and v alone) that a writable open
 * of another process made format 2 and wrote pairs in (pg_read.c, PAIRS).
 *
 * Such a store's reads of steps meet a pair's row as its mark, PAIR_MARK,
 * a value no step record has (a read from, or a scan after, a pair's
 * first gives its second the mark too: pg_read.c).  A read that meets it
 * reads the format again (Q_FORMAT); if the store is 2 by then, the pair
 * reads are made (pair_q[]), s->single cleared, and the read is done once
 * more, now splitting the pairs.  A store still of format 1 is left as it
 * is: its mark is then the step a reader refuses (PL_EVERSION).
 *
 * The store and its statements are shared by the threads that use it:
 * pair_q[] is made once, under the store's lock, before s->single is
 * cleared (an atomic store after them); a thread that reads single clear
 * reads the texts made before.  The texts of a store open single are
 * never changed or freed until its close, so a thread running a statement
 * while another clears single runs the text it took, whole.
 */
#include "pg_int.h"

#include <libpq-events.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A step's value is the mark: 3 bytes, where a record is longer. */
bool pl__pg_meets_mark(const pl__pg_store *s, int which, const PGresult *r)
{
    if (!s->was_single || (which != Q_READ && which != Q_SCAN))
        return false;
    size_t n = sizeof PAIR_MARK_BYTES - 1;
    for (int i = 0; i < PQntuples(r); i++)
        if ((size_t)PQgetlength(r, i, 1) == n &&
            !memcmp(PQgetvalue(r, i, 1), PAIR_MARK_BYTES, n))
            return true;
    return false;
}

int pl__pg_reopen_pairs(pl__pg_store *s, bool *again)
{
    *again = false;
    if (!s->was_single)
        return PL_OK;
    if (!s->single) { /* another thread has made them */
        *again = true;
        return PL_OK;
    }
    PGconn *c;
    int st = pl__pg_conn_get(s, &c);
    if (st)
        return st;
    PGresult *r = pl__pg_exec(s, c, s->q[Q_FORMAT], 0, NULL, NULL);
    uint64_t f = 0;
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        st = pl__pg_err(s, c, r, "reading the format");
    else if (PQntuples(r) != 1 || PQgetlength(r, 0, 0) != 8)
        st = pl__err(PL_ECORRUPT, "store '%s' has a malformed format record",
                     s->path);
    else
        f = pl__get_be64((const uint8_t *)PQgetvalue(r, 0, 0));
    PQclear(r);
    pl__pg_conn_put(s, c);
    if (st || f == FORMAT_SINGLE)
        return st;
    if (f != FORMAT)
        return pl__err(PL_EVERSION,
                       "store '%s' has format %llu since it was opened; this "
                       "build reads formats %d and %d",
                       s->path, (unsigned long long)f, FORMAT_SINGLE, FORMAT);
    static const int which[] = {Q_READ, Q_SCAN, Q_STATS};
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; !st && s->single && i < sizeof which / sizeof *which;
         i++)
        if (!s->pair_q[i] &&
            !(s->pair_q[i] = pl__pg_steps_sql(s, which[i], false)))
            st = pl__err(PL_ENOMEM, "out of memory");
    if (!st)
        s->single = false; /* after pair_q[]: the threads that read it clear
                              read them whole */
    pthread_mutex_unlock(&s->mu);
    *again = !st;
    return st;
}

/* ---- the pair reads, connection by connection ------------------------------
 *
 * A connection of a store open single has its reads prepared as "pl<i>",
 * reading k and v alone.  Once the store reads pairs (s->single cleared,
 * s->pair_q[] made before), each connection prepares the pair reads as
 * "pl<i>p" the next time it is taken from the pool (or opened), and says
 * so in its instance data; a read runs the pair read by that name only on
 * a connection that says so.  So a statement's name stands for one text
 * on every connection: no name is prepared again, none dropped, and a
 * connection one thread holds is the only one it changes, the others
 * left to their own next take.  A read that ran the single read on a
 * connection taken before the change met the mark again and is done once
 * more (pg_read.c), on a connection that reads pairs. */

static char g_pairs_on; /* the instance data of a connection that has them */

static int pairs_event(PGEventId id, void *info, void *pass)
{
    (void)id, (void)info, (void)pass; /* nothing of its own to free */
    return 1;
}

static bool conn_has_pairs(const PGconn *c)
{
    return PQinstanceData(c, pairs_event) == &g_pairs_on;
}

/* Prepare the pair reads on @p c, if the store reads pairs now and @p c
 * lacks them. */
int pl__pg_conn_pairs(pl__pg_store *s, PGconn *c)
{
    if (!s->was_single || s->single || !s->n_prepared || conn_has_pairs(c))
        return PL_OK;
    static const int which[] = {Q_READ, Q_SCAN};
    for (size_t i = 0; i < sizeof which / sizeof *which; i++) {
        char name[16];
        snprintf(name, sizeof name, "pl%dp", which[i]);
        pl__pg_count(1, 1);
        PGresult *r = PQprepare(c, name, s->pair_q[i], 0, NULL);
        int st = PQresultStatus(r) == PGRES_COMMAND_OK
                     ? PL_OK
                     : pl__pg_err(s, c, r, "preparing the pair reads");
        PQclear(r);
        if (st)
            return st;
    }
    if (!PQregisterEventProc(c, pairs_event, "policyledger pairs", NULL) ||
        !PQsetInstanceData(c, pairs_event, &g_pairs_on))
        return pl__err(PL_ENOMEM, "store '%s': out of memory", s->path);
    return PL_OK;
}

/* Statement @p which's text on @p c, and its name in @p name if it is
 * prepared there ("" if not). */
const char *pl__pg_q(pl__pg_store *s, PGconn *c, int which, char *name)
{
    int pair = !s->was_single     ? -1
               : which == Q_READ  ? 0
               : which == Q_SCAN  ? 1
               : which == Q_STATS ? 2
                                  : -1;
    if (pair >= 0 && pair < 2 && which < s->n_prepared && conn_has_pairs(c)) {
        snprintf(name, 16, "pl%dp", which);
        return s->pair_q[pair];
    }
    if (which < s->n_prepared) {
        snprintf(name, 16, "pl%d", which);
        return s->q[which];
    }
    name[0] = '\0';
    /* single read (seq_cst) before pair_q[], which was made before it was
     * cleared */
    return pair >= 0 && !s->single ? s->pair_q[pair] : s->q[which];
}
