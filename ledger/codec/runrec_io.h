/*
 * runrec_io.h -- how run records are read and written (runrec.c), shared
 * with the records kept beside them (siderec.c): keys, the checksum pair,
 * the format version, the checked map.
 */
#ifndef PL_RUNREC_IO_H
#define PL_RUNREC_IO_H

#include "mp.h"

PL__HIDDEN int pl__rr_pack_key(msgpack_packer *pk, const char *k);
/* Append the "sum" pair (kind @p kind, bound to @p run_id) to the record
 * begun at @p start of @p out. */
PL__HIDDEN int pl__rr_pack_sum(msgpack_packer *pk, pl__buf *out, size_t start,
                               char kind, const char *run_id);
PL__HIDDEN bool pl__rr_key_is(const uint8_t *k, size_t n, const char *want);
PL__HIDDEN char *pl__rr_dup_bytes(const uint8_t *p, size_t n);
PL__HIDDEN uint8_t *pl__rr_dup_mem(const uint8_t *p, size_t n);
/* A record's "v": PL_OK for 1 .. @p max (PL_EVERSION else). */
PL__HIDDEN int pl__rr_read_version(rd *r, const char *run_id, const char *what,
                                   unsigned max, uint64_t *version);
/* The "sum" pair at @p key: the record's last pair (@p last), matching the
 * bytes before it. */
PL__HIDDEN int pl__rr_read_sum(rd *r, const uint8_t *data, const uint8_t *key,
                               bool last, char kind, const char *run_id,
                               const char *what);
/* Check a record map whole, then position @p r on its pairs. */
PL__HIDDEN int pl__rr_map_begin(rd *r, const uint8_t *data, size_t len,
                                uint64_t *n, const char *what);
/* The extent of the (checked) value at @p r. */
PL__HIDDEN void pl__rr_value_span(rd *r, const uint8_t **v, size_t *n);

#endif /* PL_RUNREC_IO_H */
