/*
 * support_bitflip.h -- what the bit-flip tests (test_bitflip*.c) share:
 * their policies, where a store's keys and values are in its data file, and
 * a flip tried in a forked child that reports what it found.
 */
#ifndef PL_TESTS_SUPPORT_BITFLIP_H
#define PL_TESTS_SUPPORT_BITFLIP_H

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "support.h"

/*
 * Under the sanitizers, where each child costs six times more, a sweep flips
 * bit i of a key or value (counting from its first byte's lowest bit) only
 * when i % SAMPLE == 0: a stride under 8 and prime to it, so every byte of
 * every record is flipped, and the bit flipped moves along the bytes (over
 * SAMPLE bytes, every position).  A fixed stride: the same bits every time.
 * The default build flips every bit.
 */
#if defined(__SANITIZE_ADDRESS__)
#define SAMPLE 7
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SAMPLE 7
#endif
#endif
#ifndef SAMPLE
#define SAMPLE 1
#endif

/*
 * A child that reports no progress (enters no next call) for this long is
 * hung.  A guard, not a timing: the calls of a hang loop forever, so it is
 * set far above what one call takes on a slow, shared machine under the
 * sanitizers, and the clock restarts at every call the child enters.
 */
#define HANG_MS 60000

/* ---- the policies ---- */

extern bool g_die; /* set in the child that makes the crashed run ("die") */

/* outer, ask, boom, die, waitev, chain_once and the human "approve", on
 * t_registry()'s */
pl_registry *registry(void);
/* An engine on @p path (process durability), or NULL. */
pl_engine *open_engine(const char *path, const pl_registry *reg);
/* A file's bytes (caller frees). */
uint8_t *read_whole(const char *path, size_t *len);

/* ---- where the keys and values are ---- */

typedef struct target {
    size_t off, len;
    char db[16];
    char key[160];             /* the record's key, printable, for messages */
    bool root_last_of_running; /* the crashed run's root ledger's last step */
    unsigned run;              /* steps: the run's number */
} target;

typedef struct targets {
    target *v;
    size_t n, cap;
} targets;

/*
 * Find every key and value of the store's databases through LMDB: their
 * offsets in the data file are where LMDB's pointers point in its map.
 */
void find_targets_in(const char *path, const char *const *dbs, size_t n_dbs,
                     targets *keys, targets *vals, const uint8_t *crashed_last,
                     size_t crashed_last_len);

/* ---- one flip ---- */

/* What a child reports: the call it is in ('S'tage), then at the end its
 * findings. */
typedef struct report {
    bool reported;   /* a call returned PL_ECORRUPT or PL_EVERSION */
    bool nondet;     /* a replay returned PL_ENONDET */
    uint64_t digest; /* of everything read back (no check of real continue) */
} report;

/* Note status @p st in @p r: reported, caught by replay, and in the digest. */
void note(report *r, int st);
/* In the child: say which call it enters (a letter: stage_name()). */
void stage(int fd, char c);

/*
 * Write @p data with bit @p bit of byte @p off flipped to @p path (its lock
 * file removed), run the child on it, and return its report.  A hang, a
 * crash or a lost report fails the test, naming @p what.
 */
typedef void (*child_fn)(const char *path, const pl_registry *reg, int fd);
report try_flip_in(child_fn fn, const char *path, const pl_registry *reg,
                   const uint8_t *data, size_t len, size_t off, unsigned bit,
                   const char *what);

#endif /* PL_TESTS_SUPPORT_BITFLIP_H */
