/*
 * fuzz.h -- what the harnesses share: the check that stops on a broken
 * property, and JSON equality as the store keeps it.
 */
#ifndef PL_FUZZ_H
#define PL_FUZZ_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <policyledger.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A property broken: say which, and stop, so the fuzzer keeps the input. */
#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, __LINE__,     \
                    #cond, pl_errmsg());                                       \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* The same JSON, member order and repeated keys included (cJSON_Compare
 * looks each key up, so it takes {"a":1,"a":2} for {"a":1,"a":1}).
 * Numbers compare by value: -0 is stored as the integer 0. */
static inline bool same_json(const cJSON *a, const cJSON *b)
{
    if (!a || !b || (a->type & 0xff) != (b->type & 0xff))
        return false;
    if (cJSON_IsNumber(a))
        return a->valuedouble == b->valuedouble;
    if (cJSON_IsString(a))
        return strcmp(a->valuestring, b->valuestring) == 0;
    if (!cJSON_IsArray(a) && !cJSON_IsObject(a))
        return true;
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next)
        if ((cJSON_IsObject(a) && strcmp(x->string, y->string) != 0) ||
            !same_json(x, y))
            return false;
    return !x && !y;
}

/* The whole of file @p path, in memory (free() it), its length in *len;
 * a file that cannot be read whole stops the harness. */
static inline uint8_t *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK(f && fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    CHECK(n > 0);
    rewind(f);
    uint8_t *bytes = malloc((size_t)n);
    CHECK(bytes && fread(bytes, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return bytes;
}

#endif
