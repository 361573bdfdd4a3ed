/*
 * read_file.c -- the "read_file" tool: a UTF-8 text file under the sandbox
 * directory, cut at a size cap.  Also reads file:// URLs for http_get.
 */
#define _GNU_SOURCE /* O_PATH */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools.h"

/* The error-as-data code for a sandbox status. */
static const char *code_of(int st)
{
    switch (st) {
    case PL_ENOTFOUND: return PL_ERR_NOT_FOUND;
    case PL_EFORBIDDEN:
    case PL_EIO: /* permission denied, mostly */ return PL_ERR_FORBIDDEN;
    default: return PL_ERR_INVALID_INPUT;
    }
}

/* The open of @p path failed with @p st (PL_EIO): a socket (ENXIO) or
 * another file no one reads as text is InvalidInput, as a FIFO is, not
 * Forbidden (permission denied); the error is kept otherwise. */
static int special_or(int st, const pl_sandbox *sb, const char *path,
                      size_t path_len)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", pl_errmsg());
    int fd = -1;
    struct stat sst;
    bool special = pl_sandbox_open_file(&fd, sb, path, path_len, O_PATH, 0) ==
                       PL_OK &&
                   fstat(fd, &sst) == 0 &&
                   (S_ISSOCK(sst.st_mode) || S_ISCHR(sst.st_mode) ||
                    S_ISBLK(sst.st_mode) || S_ISFIFO(sst.st_mode));
    if (fd >= 0)
        close(fd);
    if (special)
        return pl__err(PL_EINVAL,
                       "'%.*s' is a special file, not a regular "
                       "file (%s)",
                       (int)path_len, path, msg);
    return pl__err(st, "%s", msg);
}

int pl__read_text(char **data, size_t *len, bool *truncated, const char **code,
                  const pl_sandbox *sb, const char *path, size_t path_len,
                  size_t cap)
{
    *data = NULL;
    *len = 0;
    *truncated = false;
    *code = PL_ERR_INVALID_INPUT;
    int fd = -1;
    char *buf = NULL;
    /* O_NONBLOCK: opening a FIFO no one writes must not wait (it is then
     * refused below, as every file but a regular one is) */
    int st = pl_sandbox_open_file(&fd, sb, path, path_len,
                                  O_RDONLY | O_NONBLOCK, 0);
    if (st == PL_EIO)
        st = special_or(st, sb, path, path_len);
    if (st) {
        *code = code_of(st);
        return st;
    }
    struct stat sst;
    if (fstat(fd, &sst) != 0) {
        st = pl__err(PL_EIO, "cannot stat '%.*s': %s", (int)path_len, path,
                     strerror(errno));
        goto done;
    }
    if (!S_ISREG(sst.st_mode)) {
        st = pl__err(PL_EINVAL, "'%.*s' is %s, not a regular file",
                     (int)path_len, path,
                     S_ISDIR(sst.st_mode) ? "a directory" : "a special file");
        goto done;
    }
    buf = malloc(cap + 1);
    if (!buf) {
        st = pl__err(PL_ENOMEM, "read_file: out of memory");
        goto done;
    }
    size_t n = 0;
    while (n < cap) {
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            st = pl__err(PL_EIO, "cannot read '%.*s': %s", (int)path_len, path,
                         strerror(errno));
            goto done;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    if (n == cap) { /* is there more? */
        char one;
        ssize_t got;
        do
            got = read(fd, &one, 1);
        while (got < 0 && errno == EINTR);
        *truncated = got > 0;
    }
    size_t bad = 0;
    long long keep = pl__text_len(buf, n, *truncated, &bad);
    if (keep < 0) {
        st = pl__err(PL_EINVAL,
                     "'%.*s' is not UTF-8 text (byte 0x%02x at offset %zu)",
                     (int)path_len, path, (unsigned)(unsigned char)buf[bad],
                     bad);
        goto done;
    }
    buf[keep] = '\0';
    *len = (size_t)keep;
    *data = buf;
    buf = NULL;
done:
    if (st && st != PL_ENOMEM)
        *code = code_of(st == PL_EIO ? PL_EINVAL : st);
    free(buf);
    close(fd);
    return st;
}

int pl__tool_read_file(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                       void *user)
{
    (void)ctx;
    const pl_tools *t = user;
    const char *path = NULL;
    if (pl_json_unpack(action->payload, "{s:s !}", "path", &path))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, pl_errmsg());
    char *data;
    size_t len;
    bool truncated;
    const char *code;
    int st = pl__read_text(&data, &len, &truncated, &code, t->sb, path,
                           strlen(path), t->max_file_bytes);
    if (st == PL_ENOMEM)
        return st;
    if (st)
        return pl_steps_add_error(out, code, pl_errmsg());
    char note[128];
    snprintf(note, sizeof note,
             "the file is larger than %zu bytes: content is its first %zu",
             t->max_file_bytes, len);
    st = pl_steps_add_resultf(out, "{s:s, s:s, s:I, s:b, s:s*}", "path", path,
                              "content", data, "bytes", (int64_t)len,
                              "truncated", truncated, "note",
                              truncated ? note : NULL);
    free(data);
    return st;
}
