/*
 * codec.h -- the on-disk encoding of steps and run records (msgpack): what
 * the engine includes.  Each format is written down at the top of the file
 * that implements it:
 *
 *   record.h    record.c       the step record, and the format versions
 *   runrec.h    runrec.c       run records: a run's info and its state
 *   schedrec.h  schedrec.c     the schedule record
 *   payload.h   mp_write.c     payloads: JSON as msgpack
 *               mp_read.c      the checked reader, decoding payloads
 *               payload_cmp.c  comparing payloads without encoding them
 *
 * (mp.h is the writer and reader those files share; nothing else uses it.)
 */
#ifndef PL_CODEC_H
#define PL_CODEC_H

#include "payload.h"
#include "record.h"
#include "runrec.h"
#include "schedrec.h"

#endif /* PL_CODEC_H */
