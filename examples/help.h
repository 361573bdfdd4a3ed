/*
 * help.h -- an example's --help written to stdout, or, when it could not
 * be (a full disk, a closed pipe), said in one line on stderr.
 */
#ifndef EXAMPLES_HELP_H
#define EXAMPLES_HELP_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The exit status of a --help whose text @p prog has printed: 0, or 1
 * when stdout refused it (the examples' "a failure"). */
static inline int help_written(const char *prog)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 0;
    fprintf(stderr, "%s: cannot write the help: %s\n", prog,
            errno ? strerror(errno) : "a write to the output failed");
    return 1;
}

#endif
