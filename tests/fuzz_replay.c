/*
 * fuzz_replay.c -- a fuzz harness (fuzz/) without libFuzzer: feed it each
 * file named on the command line, or each file in a folder named there (a
 * corpus), once.  The suite builds every harness with this, so a harness
 * always compiles, and runs its corpus: the seeds and the regress inputs of
 * past findings stay checked, under the sanitizers in their build.  A
 * broken property aborts (CHECK in fuzz.h) and fails the test.
 *
 *   corpus_NAME PATH...
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Read the file at @p path whole; NULL on failure (said on stderr). */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "corpus: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                fprintf(stderr, "corpus: %s: out of memory\n", path);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        fprintf(stderr, "corpus: %s: cannot read\n", path);
        return NULL;
    }
    *len = n;
    return buf;
}

static int one(const char *path, size_t *count)
{
    size_t len = 0;
    uint8_t *data = slurp(path, &len);
    if (!data)
        return 1;
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    (*count)++;
    return 0;
}

static int filter(const struct dirent *d) { return d->d_name[0] != '.'; }

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    size_t count = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb)) {
            fprintf(stderr, "corpus: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            bad |= one(argv[i], &count);
            continue;
        }
        struct dirent **names = NULL;
        int n = scandir(argv[i], &names, filter, alphasort);
        if (n < 0) {
            fprintf(stderr, "corpus: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
            bad |= one(path, &count);
            free(names[k]);
        }
        free(names);
    }
    printf("corpus: %zu inputs\n", count);
    return bad || count == 0;
}
