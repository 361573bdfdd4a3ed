/*
 * cron_fires.c -- the cron differential test's C side: for each line of
 * stdin, "ZONE<TAB>EXPR<TAB>START_MS<TAB>COUNT", print the next COUNT fire
 * times after START_MS (each from the last), blank-separated, or
 * "error: <message>".  tests/cron_diff.js compares them with cron-parser's.
 */
#include "cron.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        char *zone = line, *expr = strchr(zone, '\t');
        char *start = expr ? strchr(expr + 1, '\t') : NULL;
        char *count = start ? strchr(start + 1, '\t') : NULL;
        if (!count) {
            fprintf(stderr, "cron_fires: malformed line '%s'\n", line);
            return 2;
        }
        *expr++ = *start++ = *count++ = '\0';
        int64_t t = strtoll(start, NULL, 10);
        long n = strtol(count, NULL, 10);
        pl__cron c;
        pl__tz *z = NULL;
        int rc = pl__cron_parse(&c, expr);
        if (!rc)
            rc = pl__tz_load(&z, zone, NULL);
        for (long i = 0; !rc && i < n; i++) {
            rc = pl__cron_next(&t, &c, z, t);
            if (!rc)
                printf("%s%lld", i ? " " : "", (long long)t);
        }
        if (rc)
            printf("error: %s", pl_errmsg());
        printf("\n");
        pl__tz_free(z);
    }
    return 0;
}
