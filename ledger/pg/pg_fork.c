/*
 * pg_fork.c -- the store on PostgreSQL across fork(): the process's open
 * stores, their locks taken around a fork, and the process's id.
 *
 * A child made by fork() never uses its parent's connections, nor the runs
 * its parent kept (pg_cache.c): the pool and the cache know a child by its
 * process id (pl__pg_pid()), which the child's fork handler reads again.
 */
#include "pg_int.h"

#include <stdatomic.h>
#include <unistd.h>

/* fork() copies locks as they are: one another thread held (the pool's, the
 * kept runs', pg_cache.c) would stay held in the child; so the open stores'
 * locks are taken around a fork, and given back in both processes. */
static pthread_mutex_t g_stores_mu = PTHREAD_MUTEX_INITIALIZER;
static pl__pg_store *g_stores;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    pthread_mutex_lock(&g_stores_mu);
    for (pl__pg_store *s = g_stores; s; s = s->next) {
        pthread_mutex_lock(&s->mu); /* then its cache's: cache_of()'s order */
        pl__pg_cache_lock(s->cache);
    }
}

static void fork_done(void)
{
    for (pl__pg_store *s = g_stores; s; s = s->next) {
        pl__pg_cache_unlock(s->cache);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&g_stores_mu);
}

/* This process's id, kept (pl__pg_pid()): 0 until first asked. */
static _Atomic pid_t g_pid;

static void fork_child(void)
{
    atomic_store_explicit(&g_pid, getpid(), memory_order_relaxed);
    fork_done();
}

static void fork_once(void)
{
    pthread_atfork(fork_prepare, fork_done, fork_child);
    atomic_store_explicit(&g_pid, getpid(), memory_order_relaxed);
}

pid_t pl__pg_pid(void)
{
    pthread_once(&g_fork_once, fork_once); /* the child's handler first */
    return atomic_load_explicit(&g_pid, memory_order_relaxed);
}

void pl__pg_stores_add(pl__pg_store *s)
{
    pthread_once(&g_fork_once, fork_once);
    pthread_mutex_lock(&g_stores_mu);
    s->next = g_stores;
    g_stores = s;
    pthread_mutex_unlock(&g_stores_mu);
}

void pl__pg_stores_remove(pl__pg_store *s)
{
    pthread_mutex_lock(&g_stores_mu);
    pl__pg_store **pp = &g_stores;
    while (*pp && *pp != s)
        pp = &(*pp)->next;
    if (*pp)
        *pp = s->next;
    pthread_mutex_unlock(&g_stores_mu);
}
