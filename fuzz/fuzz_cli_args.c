/*
 * fuzz_cli_args.c -- the tools' argument parsing (tools/cli.c), in process:
 * the bytes, split at NUL, are an argv that is read as the tools read
 * theirs (options with "--name=value" or "--name value", times, JSON
 * objects), and each value is shortened and printed as the tools do.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fuzz.h"

#define MAX_ARGS 64

/* 2026-11-24T00:00:00Z: a fixed "now", so runs are repeatable. */
#define NOW_US 1795478400000000LL

static void value(const char *name, const char *v)
{
    if (!v)
        return;
    int64_t us = 0;
    if (cli_parse_time(&us, v, NOW_US)) {
        char iso[40], human[40];
        cli_time_iso(iso, sizeof iso, us, true);
        cli_time_human(human, sizeof human, us);
        int64_t again = 0;
        /* what a time prints as reads back as that time (the format
         * has four-digit years from 1970) */
        if (us >= 0 && us < 253402300800000000LL)
            CHECK(cli_parse_time(&again, iso, NOW_US) && again == us);
    }
    if (strcmp(name, "--payload") == 0) {
        cJSON *j = cli_parse_object(v, "the payload");
        CHECK(!j || cJSON_IsObject(j));
        /* its "..._us" members as the tools print times: any number, in
         * int64's range or not, without undefined behaviour */
        for (const cJSON *m = j ? j->child : NULL; m; m = m->next)
            if (m->string)
                (void)cli_json_int_of(j, m->string);
        if (j)
            (void)cli_json_times_as_digits(j);
        char *text = j ? cli_json_compact(j) : NULL;
        free(text);
        cJSON_Delete(j);
    }
    size_t n = strlen(v);
    for (size_t max = 8; max <= n + 1 && max < 64; max += 7) {
        char *copy = strdup(v);
        CHECK(copy != NULL);
        cli_shorten(copy, max);
        CHECK(strlen(copy) <= max);
        free(copy);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[] = {"--run",     "--since",  "--until",
                                        "--payload", "--format", "--status"};
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = (char *)"ledger-dump";
    for (size_t i = 0; i <= size && argc < MAX_ARGS;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        bool matched = false;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            int before = i;
            if (cli_option(argc, argv, &i, names[k], &v)) {
                CHECK(i == before || i == before + 1);
                CHECK(i < argc);
                value(names[k], v);
                matched = true;
                break;
            }
            CHECK(i == before);
        }
        if (!matched)
            value("", argv[i]);
    }
    free(buf);
    return 0;
}
