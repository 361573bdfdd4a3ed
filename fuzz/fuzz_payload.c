/*
 * fuzz_payload.c -- payload encoding (ledger/codec/mp_write.c) from arbitrary JSON
 * text.  Whatever cJSON makes of the text: encoding returns a status; a
 * payload that encodes passes the reader's check and decodes back to JSON
 * equal to what was encoded (what is written can always be read).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "payload.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *j = cJSON_ParseWithLength((const char *)data, size);
    if (!j)
        return 0;
    pl__buf b = {0};
    int rc = pl__payload_encode(&b, j, (size_t)1 << 20);
    CHECK(rc == PL_OK || rc == PL_EJSON || rc == PL_ELIMIT || rc == PL_ENOMEM);
    if (rc == PL_OK) {
        CHECK(cJSON_IsObject(j));
        CHECK(pl__payload_check(b.data, b.len, true) == PL_OK);
        cJSON *back = NULL;
        CHECK(pl__payload_decode(&back, b.data, b.len) == PL_OK);
        CHECK(same_json(j, back));
        CHECK(pl__payload_equal(b.data, b.len, b.data, b.len));
        char *text = pl__payload_text(b.data, b.len, 64);
        CHECK(text != NULL);
        free(text);
        cJSON_Delete(back);
    }
    /* any JSON value, as a side effect's value is stored */
    pl__buf v = {0};
    rc = pl__named_value_encode(&v, "value", j, (size_t)1 << 20);
    CHECK(rc == PL_OK || rc == PL_EJSON || rc == PL_ELIMIT || rc == PL_ENOMEM);
    if (rc == PL_OK) {
        /* read back as the engine reads it: the value on its own, its
         * depth counted from itself, not from the record around it */
        const uint8_t *val;
        size_t val_len;
        CHECK(pl__map_find(v.data, v.len, "value", &val, &val_len));
        cJSON *back = NULL;
        CHECK(pl__payload_decode(&back, val, val_len) == PL_OK);
        CHECK(same_json(j, back));
        cJSON_Delete(back);
    }
    pl__buf_free(&v);
    pl__buf_free(&b);
    cJSON_Delete(j);
    return 0;
}
