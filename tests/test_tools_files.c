/*
 * test_tools_files.c -- what read_file and http_get's file:// URLs say of
 * the files they meet (policies/tools/read_file.c): each tool is a run's
 * root here, so its result (or error result) is the run's, recorded in a
 * real ledger.  test_tools.c holds the rest of the tools.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static struct {
    pl_registry *reg;
    pl_tools *tools;
    pl_engine *engine;
    char dir[4096]; /* the sandbox directory */
    int runs;
} F;

static void open_tools(size_t cap)
{
    snprintf(F.dir, sizeof F.dir, "%s/work", t_tmpdir());
    cr_assert(mkdir(F.dir, 0755) == 0);
    pl_tools_options o = PL_TOOLS_OPTIONS_INIT;
    o.root = F.dir;
    o.max_file_bytes = cap;
    o.max_body_bytes = cap;
    cr_assert_eq(pl_tools_new(&F.tools, &o), PL_OK, "%s", pl_errmsg());
    cr_assert_eq(pl_registry_new(&F.reg), PL_OK);
    cr_assert_eq(pl_tools_register(F.reg, F.tools), PL_OK, "%s", pl_errmsg());
    F.engine = t_engine(t_store_path(), F.reg, PL_DURABILITY_PROCESS);
}

static void close_tools(void)
{
    pl_engine_close(F.engine);
    pl_registry_free(F.reg);
    pl_tools_free(F.tools);
    memset(&F, 0, sizeof F);
    t_cleanup();
}

/* Run @p tool on @p name: {"path": name}, or for http_get {"url":
 * "file://<dir>/name"}.  The result, or the error result (caller frees). */
static cJSON *run_on(const char *tool, const char *name)
{
    cJSON *args = cJSON_CreateObject();
    char url[8400], id[32];
    snprintf(url, sizeof url, "file://%s/%s", F.dir, name);
    bool http = strcmp(tool, "http_get") == 0;
    cJSON_AddStringToObject(args, http ? "url" : "path", http ? url : name);
    char *text = t_text(args);
    snprintf(id, sizeof id, "r%d", ++F.runs);
    pl_outcome *o = t_start(F.engine, tool, text, id);
    cr_assert_eq(o->status, PL_RUN_COMPLETED, "%s", o->reason ? o->reason : "");
    cJSON *r = cJSON_Duplicate(pl_outcome_result(o), 1);
    pl_outcome_free(o);
    free(text);
    cJSON_Delete(args);
    return r;
}

static const char *text_of(const cJSON *v, const char *key)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, key);
    return cJSON_IsString(s) ? s->valuestring : "";
}

static const char *const k_readers[] = {"read_file",
#if PL_WITH_CURL
                                        "http_get"
#endif
};

/* A Unix socket is a special file as a FIFO is (InvalidInput), not an
 * escape (Forbidden): open(2) says ENXIO of it. */
Test(tools_files, a_socket_is_a_special_file, .fini = close_tools)
{
    open_tools(0);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert(s >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "sock");
    cr_assert_eq(chdir(F.dir), 0); /* the path may be past sun_path's size */
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    for (size_t i = 0; i < sizeof k_readers / sizeof *k_readers; i++) {
        cJSON *r = run_on(k_readers[i], "sock");
        char *t = t_text(r);
        cr_expect_str_eq(text_of(r, "code"), PL_ERR_INVALID_INPUT, "%s: %s",
                         k_readers[i], t);
        cr_expect(strstr(text_of(r, "message"), "a special file"), "%s", t);
        free(t);
        cJSON_Delete(r);
    }
    close(s);
}

/* Past the cap, a file:// body is cut as read_file's content is: at a
 * character's boundary, "truncated" and a "note" that says so, as for an
 * http:// body. */
Test(tools_files, a_file_past_the_cap_is_cut_with_a_note, .fini = close_tools)
{
    open_tools(999);
    static char big[4000];
    for (size_t i = 0; i < sizeof big; i += 2)
        big[i] = (char)0xc3, big[i + 1] = (char)0xa9; /* "é" */
    char p[8400];
    snprintf(p, sizeof p, "%s/big.txt", F.dir);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(big, 1, sizeof big, f), sizeof big);
    fclose(f);
    for (size_t i = 0; i < sizeof k_readers / sizeof *k_readers; i++) {
        cJSON *r = run_on(k_readers[i], "big.txt");
        char *t = t_text(r);
        cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(r, "truncated")), "%s", t);
        cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(r, "bytes")), 998,
                     "%s", t);
        cr_expect(strstr(text_of(r, "note"), "larger than 999 bytes"), "%s: %s",
                  k_readers[i], t);
        free(t);
        cJSON_Delete(r);
    }
}
