/*
 * support_store.h -- what the tests of the LMDB store (test_store*.c) share:
 * their policies, expected ledgers and raw LMDB access.
 */
#ifndef PL_TESTS_SUPPORT_STORE_H
#define PL_TESTS_SUPPORT_STORE_H

#include "support.h"

#include "codec.h"
#include "hash.h"
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct want_step {
    char path[64];
    char id[80];
    uint32_t seq;
    pl_step_type type;
} want_step;

typedef struct wants {
    want_step *v;
    size_t n, cap;
} wants;

typedef struct seen {
    wants got;
    size_t stop_at; /* 0: never stop */
    int stop_with;
} seen;

typedef struct raw {
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta, runs, state, steps;
} raw;

typedef struct listed {
    char ids[400][16];
    pl_run_status status[400];
    uint64_t steps[400];
    char policy[400][16];
    int error[400];
    bool has_reason[400];
    size_t n;
    size_t stop_at;
} listed;

pl_registry *registry(void);

/* An engine with map size options; fails the test unless it opens.  These
 * tests never crash the machine, so process durability (no fsync) keeps
 * them fast without weakening what they check. */
pl_engine *open_sized(const char *path, const pl_registry *reg, pl_durability d,
                      size_t map_size, size_t map_size_max);

pl_engine *open_with(const char *path, const pl_registry *reg, size_t map_size,
                     size_t map_size_max);

void start_ok(pl_engine *e, const char *policy, const char *payload,
              const char *id);

void want_add(wants *w, const char *path, uint32_t seq, pl_step_type type);

/*
 * The steps of a "nest" run in tree order: an invocation's steps, each
 * action_call followed by the ledger of the call it made (its callee's
 * invocation is at <path>.<seq of the action_call>).
 */
void nest_expect(wants *w, const char *path, int depth, int fanout);

int collect(const pl_step *s, void *user);

size_t walk_count(pl_engine *e, const char *id);

void expect_walk(pl_engine *e, const char *id, const wants *w);

/* Every invocation's ledger, read alone, holds exactly its expected steps,
 * in seq order. */
void expect_ledgers(pl_engine *e, const char *id, const wants *w,
                    const char *actor);

void raw_open(raw *r, const char *path, bool dir);

void raw_close(raw *r);

/* The run's number: the first 8 bytes of its `runs` value. */
uint64_t raw_run_num(raw *r, const char *id);

/* @p v at @p p, big-endian. */
void be32(uint8_t *p, uint32_t v);
/* A step key as the layout table says: the run number (u64), each path
 * component (u32), the seq (u32), all big-endian. */
size_t step_key(uint8_t *out, uint64_t num, const uint32_t *comps,
                unsigned depth, uint32_t seq);

/* Copy out a stored step record (caller frees). */
uint8_t *raw_get_step(raw *r, const uint8_t *key, size_t klen, size_t *len);

void raw_put_step(raw *r, const uint8_t *key, size_t klen, const uint8_t *val,
                  size_t vlen);

/* Where a record's payload starts: after the 7-field header. */
size_t payload_offset(const uint8_t *rec, size_t len);

int list_visit(const pl_run_info *info, void *user);

/* Run "chain" {"n": 5} as @p id (steps 0:0..0:10 in the root, the result
 * of call k at 0:(2k+1), holding its callee's one step); open raw. */
uint64_t chain_then_raw(const char *path, pl_registry *reg, const char *id,
                        raw *r);

/* The bystander run, untouched, still verifies and replays. */
void bystander_fine(pl_engine *e);

/* Run "nest" {"depth": 1, "fanout": 3} as @p id: the root records calls at
 * 0:0, 0:2, 0:4, their results at 0:1, 0:3, 0:5, a text at 0:6 and its
 * result at 0:7; each callee 0.k records a text at 0.k:0 and its result,
 * a mirror, at 0.k:1.  Then open raw. */
uint64_t nest_then_raw(const char *path, pl_registry *reg, const char *id,
                       raw *r);

/* Whether the store holds a step record at @p key. */
bool raw_has_step(raw *r, const uint8_t *key, size_t klen);

off_t file_size(const char *path);

#endif
