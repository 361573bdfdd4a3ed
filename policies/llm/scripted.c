/*
 * scripted.c -- the scripted model (scripted://PATH): a JSON script's
 * responses played back, one a model call, offline and deterministic
 * (policyledger_llm.h has the script's format).  Its responses are
 * retried as an HTTP call's are (transport.c), without waiting.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attempt.h"
#include "llm.h"

typedef pl__llm_attempt attempt;

/* The script at @p path, a regular file (a device or a FIFO could be read
 * for ever, or wait for a writer). */
static int read_file(char **out, size_t *len, const char *path)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return pl__err(PL_EIO, "scripted model: cannot open '%s': %s", path,
                       strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return pl__err(PL_EIO,
                       "scripted model: '%s' is not a regular file: a script "
                       "is a JSON file",
                       path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    pl__buf b = {0};
    char chunk[4096];
    size_t n;
    int st = PL_OK;
    while (!st && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        st = pl__buf_append(&b, chunk, n);
    if (!st && ferror(f))
        st = pl__err(PL_EIO, "scripted model: cannot read '%s'", path);
    fclose(f);
    if (!st)
        st = pl__buf_append(&b, "", 1);
    if (st) {
        pl__buf_free(&b);
        return st;
    }
    *out = (char *)b.data;
    *len = b.len - 1;
    return PL_OK;
}

static int count_served(const char *script, long pos)
{
    char *path = pl__asprintf("%s.served", script);
    if (!path)
        return pl__err(PL_ENOMEM, "out of memory");
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int st = PL_OK;
    if (fd < 0)
        st = pl__err(PL_EIO, "scripted model: cannot open '%s': %s", path,
                     strerror(errno));
    else {
        char line[32];
        int n = snprintf(line, sizeof line, "%ld\n", pos);
        if (write(fd, line, (size_t)n) != n)
            st = pl__err(PL_EIO, "scripted model: cannot write '%s'", path);
        close(fd);
    }
    free(path);
    return st;
}

/* A script's response as a normalised answer. */
static int scripted_answer(attempt *a, const cJSON *r, size_t body_len)
{
    cJSON *ans = cJSON_CreateObject();
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(r, "text");
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(r, "tool_calls");
    bool ok = ans != NULL;
    if (ok && text)
        ok = cJSON_AddItemToObjectCS(ans, "text", cJSON_Duplicate(text, 1));
    if (ok)
        ok = cJSON_AddItemToObjectCS(ans, "tool_calls",
                                     calls ? cJSON_Duplicate(calls, 1)
                                           : cJSON_CreateArray());
    if (!ok) {
        cJSON_Delete(ans);
        return pl__err(PL_ENOMEM, "out of memory");
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "usage");
    const cJSON *ui = cJSON_GetObjectItemCaseSensitive(u, "input");
    const cJSON *uo = cJSON_GetObjectItemCaseSensitive(u, "output");
    char *t = cJSON_PrintUnformatted(ans);
    /* a count of tokens, as the providers' is read (response.c), else
     * the default */
    a->in_tokens = cJSON_IsNumber(ui) && ui->valuedouble >= 0 &&
                           ui->valuedouble <= 1e15
                       ? (long)ui->valuedouble
                       : (long)(body_len / 4);
    a->out_tokens = cJSON_IsNumber(uo) && uo->valuedouble >= 0 &&
                            uo->valuedouble <= 1e15
                        ? (long)uo->valuedouble
                        : (long)(t ? strlen(t) / 4 : 0);
    free(t);
    a->status = 200;
    a->answer = ans;
    return PL_OK;
}

/* Wait @p delay_ms before a piece of a streamed answer, but not past
 * @p deadline_ms (Unix ms; 0: none): false when the deadline came
 * first. */
static bool pace(long delay_ms, int64_t deadline_ms)
{
    if (deadline_ms) {
        int64_t left = deadline_ms - (int64_t)(pl__now_us() / 1000);
        if (left <= 0)
            return false;
        if (delay_ms >= left) {
            pl__llm_sleep_ms((long)left);
            return false;
        }
    }
    if (delay_ms > 0)
        pl__llm_sleep_ms(delay_ms);
    return true;
}

/* A streamed scripted answer: the text word by word, each call's
 * arguments in pieces of 8 bytes or a little less (cut between
 * characters, as a provider's deltas are: each piece is UTF-8 on its
 * own), @p delay_ms before each piece.  False
 * when the call's deadline came before its last piece. */
static bool scripted_stream(pl__llm_deltas *d, const cJSON *answer,
                            long delay_ms, int64_t deadline_ms)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(answer, "text");
    const char *t = cJSON_IsString(text) ? text->valuestring : "";
    while (*t) {
        size_t n = strcspn(t, " \n");
        n += strspn(t + n, " \n");
        if (!pace(delay_ms, deadline_ms))
            return false;
        pl__llm_delta_send(d, PL_LLM_DELTA_TEXT, t, n, NULL, 0, false);
        t += n;
    }
    const cJSON *c;
    unsigned i = 0;
    cJSON_ArrayForEach(c,
                       cJSON_GetObjectItemCaseSensitive(answer, "tool_calls"))
    {
        char *printed = NULL;
        const char *p = pl__llm_args_text(c, &printed);
        for (size_t left = strlen(p); left;) {
            size_t n = left <= 8 ? left : pl__llm_char_start(p, 8);
            if (!n) /* no character starts in them: not UTF-8 */
                n = 8;
            if (!pace(delay_ms, deadline_ms)) {
                free(printed);
                return false;
            }
            pl__llm_delta_send(d, PL_LLM_DELTA_TOOL_ARGS, p, n,
                               pl__llm_call_name(c), i, false);
            p += n;
            left -= n;
        }
        free(printed);
        i++;
    }
    return true;
}

/* The call's deadline came: *a a Timeout saying @p why, what it held
 * dropped. */
static int timed_out(attempt *a, const char *why)
{
    cJSON_Delete(a->answer);
    a->answer = NULL;
    a->status = 0;
    a->timed_out = true;
    a->error_code = (char *)PL_ERR_TIMEOUT;
    free(a->message);
    a->message = pl__strdup(why);
    return a->message ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

int pl__llm_scripted_exchange(attempt *a, unsigned *attempts, long *pos,
                              const pl__llm *m, const char *body,
                              int64_t deadline_ms, pl__llm_deltas *deltas)
{
    char *text = NULL;
    size_t len = 0;
    int st = read_file(&text, &len, m->url.model);
    if (st)
        return st;
    cJSON *script = NULL;
    st = pl_json_parse(&script, text, len);
    free(text);
    if (st)
        return pl__err(st, "scripted model: '%s': %s", m->url.model,
                       pl_errmsg());
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(script, "responses");
    if (!cJSON_IsArray(rs)) {
        cJSON_Delete(script);
        return pl__err(PL_EJSON,
                       "scripted model: '%s' is not a JSON object with a "
                       "\"responses\" array",
                       m->url.model);
    }
    unsigned max = m->o.max_attempts ? m->o.max_attempts : PL__LLM_DEF_ATTEMPTS;
    for (unsigned i = 0; !st; i++) {
        /* the call's deadline, as over HTTP: one already past asks
         * nothing; a retry it has come for is not made */
        if (deadline_ms && (int64_t)(pl__now_us() / 1000) >= deadline_ms) {
            if (i == 0)
                st = timed_out(a, "the call's deadline has passed: the "
                                  "model was not asked");
            else
                pl__llm_gave_up(a, "the call's deadline has passed", i);
            break;
        }
        pl__llm_attempt_clear(a);
        *attempts = i + 1;
        const cJSON *r = cJSON_GetArrayItem(rs, (int)*pos);
        if (!cJSON_IsObject(r)) {
            a->error_code = (char *)PL_ERR_INVALID_INPUT;
            a->message = pl__asprintf("the scripted model has no response %ld "
                                      "(the script has %d)",
                                      *pos, cJSON_GetArraySize(rs));
            break;
        }
        if ((st = count_served(m->url.model, *pos)))
            break;
        (*pos)++;
        const cJSON *status = cJSON_GetObjectItemCaseSensitive(r, "status");
        if (cJSON_IsNumber(status) && status->valueint != 200) {
            a->status = status->valueint;
            a->retryable = pl__llm_status_retryable(a->status);
            a->error_code = (char *)pl__llm_status_code(a->status);
            a->message = pl__asprintf("HTTP %ld from the scripted model",
                                      a->status);
            if (a->retryable && i + 1 < max)
                continue;
            if (a->retryable) /* as an HTTP call says it (http_exchange) */
                pl__llm_gave_up(a, "no attempt was left (max_attempts %u)",
                                i + 1, max);
            break;
        }
        st = scripted_answer(a, r, strlen(body));
        if (!st && deltas) {
            const cJSON *dl = cJSON_GetObjectItemCaseSensitive(
                script, "stream_delay_ms");
            long delay = cJSON_IsNumber(dl) && dl->valuedouble > 0 &&
                                 dl->valuedouble < 10000
                             ? (long)dl->valuedouble
                             : 0;
            if (!scripted_stream(deltas, a->answer, delay, deadline_ms)) {
                st = timed_out(a, "the call's deadline came before the "
                                  "scripted answer was whole: what was "
                                  "streamed of it is void");
                if (deltas->sent)
                    pl__llm_delta_send(deltas, PL_LLM_DELTA_RESTARTED, "", 0,
                                       NULL, 0, false);
            }
        }
        break;
    }
    cJSON_Delete(script);
    return st;
}
