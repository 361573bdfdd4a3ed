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
 * Under the sanitizers, where each flip costs several times more, a sweep flips
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

/* ---- the flips ---- */

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

/* One flip: bit @c bit (8: none, the store as built) of byte @c off; @c what
 * names it in a failure's message, @c t is the caller's (its target). */
typedef struct flip {
    size_t off;
    unsigned bit;
    const target *t;
    char what[200];
} flip;

typedef struct flip_list {
    flip *v;
    size_t n, cap;
} flip_list;

/* Add bit @p bit of byte @p off to @p fs, named as printf() would @p fmt. */
void flip_add(flip_list *fs, size_t off, unsigned bit, const target *t,
              const char *fmt, ...) PL__PRINTF(5, 6);

/*
 * The child's part: every call on the store at @p path, saying which call it
 * is in on @p fd (stage()); returns its findings.
 */
typedef report (*child_fn)(const char *path, const pl_registry *reg, int fd);

/*
 * Try @p fs's flips in turn, each on @p data (@p len bytes) written with
 * its bit flipped to @p path (a new file, no lock file), by @p fn in a
 * forked child; returns their reports (fs->n of them; the caller frees
 * them).  A child tries up to FLIP_BATCH flips in a row: a fork costs more
 * than a flip's calls under the sanitizers, and every flip starts on a new
 * file with its engine opened afresh.  A hang, a crash or a lost report fails the test, naming
 * the flip it happened in.
 */
#define FLIP_BATCH 32
report *try_flips_in(child_fn fn, const char *path, const pl_registry *reg,
                     const uint8_t *data, size_t len, const flip_list *fs);
/* The store as built (no flip), tried once as above. */
report try_unflipped(child_fn fn, const char *path, const pl_registry *reg,
                     const uint8_t *data, size_t len);

#endif /* PL_TESTS_SUPPORT_BITFLIP_H */
