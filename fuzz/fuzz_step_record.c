/*
 * fuzz_step_record.c -- the step record decoder (ledger/codec/record.c) over
 * arbitrary bytes.  Whatever the bytes, decoding returns a status and never
 * reads outside them; a record that decodes has a payload that decodes to
 * JSON, and that JSON encodes and decodes back to itself.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payload.h"
#include "record.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)pl__rec_steps(data, size);
    pl__rec lazy, rec;
    int lazy_rc = pl__rec_decode_lazy(&lazy, data, size);
    int rc = pl__rec_decode(&rec, data, size);
    CHECK(rc == PL_OK || rc == PL_ECORRUPT || rc == PL_EVERSION ||
          rc == PL_ELIMIT);
    if (rc != PL_OK)
        return 0;
    /* the full decode is the lazy one plus the payload's check */
    CHECK(lazy_rc == PL_OK && lazy.seq == rec.seq && lazy.type == rec.type &&
          lazy.payload == rec.payload);
    CHECK(pl__actor_ok((const uint8_t *)rec.actor, rec.actor_len));
    CHECK(rec.payload >= data && rec.payload + rec.payload_len <= data + size);

    cJSON *j = NULL;
    int drc = pl__payload_decode_in(&j, rec.payload, rec.payload_len,
                                    pl__step_wrapping(rec.type));
    CHECK(drc == PL_OK || drc == PL_ENOMEM);
    if (drc != PL_OK)
        return 0;
    /* what was read writes back to the same JSON */
    pl__buf b = {0};
    if (pl__payload_encode(&b, j, (size_t)1 << 30) == PL_OK) {
        cJSON *back = NULL;
        CHECK(pl__payload_decode(&back, b.data, b.len) == PL_OK);
        CHECK(same_json(j, back));
        CHECK(pl__payload_equal(rec.payload, rec.payload_len, b.data, b.len));
        cJSON_Delete(back);
    }
    pl__buf_free(&b);
    char *text = pl__payload_text(rec.payload, rec.payload_len, 200);
    free(text);
    cJSON_Delete(j);
    return 0;
}
