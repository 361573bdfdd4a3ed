/*
 * options.c -- pl-bench's command line: the usage, and the workloads
 * --only names.
 */
#include "bench.h"

#include <string.h>
#include <strings.h>

void usage(FILE *f)
{
    fprintf(
        f, "usage: pl-bench [--quick] [--json] [--dir DIR] [--only LIST]\n"
           "       pl-bench [--quick] [--json] [--only LIST] --store URI\n"
           "  --quick     small sizes, finishes in well under a minute\n"
           "  --json      print one JSON document instead of the table\n"
           "  --dir DIR   where the stores go (default: a new directory under\n"
           "              $TMPDIR or /tmp)\n"
           "  --only LIST the workloads to run, e.g. w1,w4, fanout, churn, "
           "agent, rate,\n"
           "              mcp or take (default: all)\n"
           "  --store URI W1, W3, W6, W7, W8, rate, take and churn on "
           "PostgreSQL (a\n"
           "              postgresql:// URI), W1 and W3 next to a libpq floor "
           "(--only: of\n"
           "              these)\n"
           "  -h, --help  this text\n"
           "Exit status: 0 every workload ran, 1 one did not (or DIR cannot be "
           "made),\n"
           "2 bad usage.\n");
}

unsigned parse_only(const char *list)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {
        {"w1", 1u << 1},       {"w2", 1u << 2},       {"w3", 1u << 3},
        {"w4", 1u << 4},       {"w5", 1u << 5},       {"w6", 1u << 6},
        {"w7", 1u << 7},       {"w8", 1u << 8},       {"fanout", ONLY_FANOUT},
        {"churn", ONLY_CHURN}, {"agent", ONLY_AGENT}, {"rate", ONLY_RATE},
        {"mcp", ONLY_MCP},     {"take", ONLY_TAKE}};
    unsigned mask = 0;
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof names / sizeof *names; i++)
            if (strlen(names[i].name) == n && !strncasecmp(p, names[i].name, n))
                bit = names[i].bit;
        if (!bit)
            return 0;
        mask |= bit;
        p += n;
        if (*p == ',' && !*++p)
            return 0;
    }
    return mask;
}
