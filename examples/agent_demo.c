/*
 * agent-demo -- a research-and-approve agent whose every model call, tool
 * call and approval is durable.  Kill it at any point and run it again (or
 * let ledger-replay finish it): no model call is paid for twice, no tool
 * call repeats, and the human's approval is never lost.
 *
 *   agent-demo [--store PATH] [--model URL] [--data DIR] [--question TEXT]
 *              [--run ID] [--crash-after-steps N] [--answer JSON]
 *              [--token T] [--plugin LIB.so] [--stream]
 *              [--approval-timeout MS] [--mcp NAME=SPEC]
 *              [--mcp-env NAME=VAR] [--mcp-token-env NAME=VAR]
 *              [--mcp-unchecked]
 *
 * With --approval-timeout, the approval is timed: the run waits (parked in
 * the store) up to MS for an "approval" event, which --answer sends, else
 * escalates; run agent-demo again (or a worker, or ledger-replay --wake)
 * after that time to let it escalate.  The timeout is the run's, as its
 * question: another for a run that exists is bad usage.
 *
 * With --mcp NAME=SPEC, the tools of the MCP server SPEC
 * (policyledger_mcp.h) are registered as "NAME.TOOL".  Mounted as "fs",
 * the reference filesystem server
 * (@modelcontextprotocol/server-filesystem) replaces the built-in
 * read_file: the model reads the data through it, and the default model is
 * the script that does (agent/script-mcp.json).  A tool whose inputSchema
 * the validator refuses fails the server, unless --mcp-unchecked
 * registers it without the schema (pl_mcp_options.unchecked_schemas).
 * --mcp-env and --mcp-token-env give a server variables of this
 * environment, as ledger-replay's do (tools/mcp_flags.c).
 *
 * The agent's policies come from agent-plugin.so (next to this program),
 * loaded as ledger-replay loads it, configured through AGENT_MODEL and
 * AGENT_DATA, which this program sets from --model and --data.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <policyledger_llm.h>
#include <policyledger_mcp.h>

#include "help.h"
#include "mcp_flags.h"

#define DEFAULT_QUESTION                                                       \
    "What will maintaining our delivery fleet cost over the next three "       \
    "years?"

typedef struct demo {
    long crash_after;
    long boundary;
} demo;

/* pl_run_walk() visitor: count the steps stored. */
static int count_step(const pl_step *step, void *user)
{
    (void)step;
    ++*(unsigned long long *)user;
    return 0;
}

static void on_event(const pl_event *ev, void *user)
{
    demo *d = user;
    if (ev->kind != PL_EVENT_STEP_APPENDED && ev->kind != PL_EVENT_COMMIT)
        return;
    d->boundary++;
    if (d->crash_after > 0 && d->boundary == d->crash_after) {
        const char *type = ev->kind == PL_EVENT_STEP_APPENDED
                               ? pl_step_type_name(ev->step_type)
                               : NULL;
        printf("*** SIGKILL at step boundary %ld (%s%s%s%s%s%s%s) ***\n",
               d->boundary, pl_event_kind_name(ev->kind), type ? " " : "",
               type ? type : "", type && ev->policy ? " by " : "",
               type && ev->policy ? ev->policy : "", ev->path ? " in " : "",
               ev->path ? ev->path : "");
        fflush(stdout);
        raise(SIGKILL);
    }
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: agent-demo [--store PATH] [--model URL] [--data DIR]\n"
        "                  [--question TEXT] [--run ID] "
        "[--crash-after-steps N]\n"
        "                  [--answer JSON] [--token T] [--plugin LIB.so]\n"
        "                  [--stream] [--approval-timeout MS] "
        "[--mcp NAME=SPEC]\n"
        "                  [--mcp-env NAME=VAR] [--mcp-token-env NAME=VAR]\n"
        "                  [--mcp-unchecked]\n"
        "\n"
        "Researches a question with a model and tools (calculator, read_file,\n"
        "http_get), then waits for a human to approve the answer.  Every "
        "model\ncall, tool call and the approval is a durable step: run it "
        "again\n(same --store and --run) to continue where it stopped.\n"
        "\n"
        "  --store PATH     LMDB store file (default agent-demo.db)\n"
        "  --model URL      the model (default: scripted://agent/script.json "
        "next to\n"
        "                   this program, offline; or openai://gpt-4o-mini "
        "with\n"
        "                   OPENAI_API_KEY set)\n"
        "  --data DIR       the data the tools may read (default: agent/data "
        "next\n"
        "                   to this program)\n"
        "  --question TEXT  the question (default: the fleet's maintenance "
        "cost);\n"
        "                   a run's own: another for a run that exists is "
        "refused\n"
        "  --run ID         the run's id (default research-1)\n"
        "  --crash-after-steps N\n"
        "                   SIGKILL this process at step boundary N (from 1: a\n"
        "                   step appended or a commit made)\n"
        "  --answer JSON    resume the suspended run with the human's answer,\n"
        "                   e.g. '{\"approved\": true}'\n"
        "  --token T        the resume token (default: the run's own)\n"
        "  --plugin LIB.so  the agent's plugin (default: agent-plugin.so "
        "next to\n"
        "                   this program)\n"
        "  --stream         print the model's answers as they are written "
        "(a turn\n"
        "                   served from the ledger comes whole)\n"
        "  --approval-timeout MS\n"
        "                   a new run waits up to MS (0 to 1e12) for the "
        "approval (an\n"
        "                   event, sent by --answer), else escalates: run\n"
        "                   agent-demo again after MS to let it escalate;\n"
        "                   a run's own: another for a run that exists is "
        "refused\n"
        "  --mcp NAME=SPEC  register the tools of an MCP server as NAME.TOOL\n"
        "                   (SPEC \"stdio:COMMAND ARG...\" or an http:// URL;\n"
        "                   its standard error goes to STORE.mcp.log); as\n"
        "                   \"fs\", the reference filesystem server, the model\n"
        "                   reads files through it instead of read_file (the\n"
        "                   default model: agent/script-mcp.json).  Give the\n"
        "                   same --mcp to every run of a run, and to\n"
        "                   ledger-replay\n"
        "  --mcp-env NAME=VAR\n"
        "                   pass the variable VAR of this environment on to\n"
        "                   the process of --mcp server NAME (a stdio: one;\n"
        "                   repeatable)\n"
        "  --mcp-token-env NAME=VAR\n"
        "                   send VAR's value as the bearer token of --mcp\n"
        "                   server NAME (an http(s):// one; never recorded)\n"
        "  --mcp-unchecked  a tool of an --mcp server whose inputSchema the\n"
        "                   validator refuses is registered without it (its\n"
        "                   arguments unchecked), not the server refused\n"
        "\n"
        "Exit status: 0 completed or waiting for approval (or its answer "
        "delivered),\n1 failed (or ended in an error result, or the "
        "store, the plugin or an MCP\nserver cannot be opened, or an "
        "answer is refused), 2 bad usage (or an MCP tool's schema refused\nwithout --mcp-unchecked).\n");
}

/* A usage error: one line, and where the rest is said. */
static int bad_usage(const char *what, const char *arg)
{
    fprintf(stderr, "agent-demo: %s '%s' (see --help)\n", what, arg);
    return 2;
}

static int parse_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* The run's question (its root payload's) is @p q. */
static bool same_question(const cJSON *payload, const char *q)
{
    const cJSON *had = cJSON_GetObjectItemCaseSensitive(payload, "question");
    return cJSON_IsString(had) && !strcmp(had->valuestring, q);
}

/* Another --approval-timeout than the run's (its root payload's
 * approval_timeout_ms, none for an untimed approval) is said, and true. */
static bool other_timeout(const cJSON *payload, long ms, const char *run_id)
{
    const cJSON *had = cJSON_GetObjectItemCaseSensitive(payload,
                                                        "approval_timeout_ms");
    if (cJSON_IsNumber(had) && had->valuedouble == (double)ms)
        return false;
    if (cJSON_IsNumber(had))
        fprintf(stderr,
                "agent-demo: run %s waits up to %.0f ms for its approval, "
                "not %ld; give another --run for this one\n",
                run_id, had->valuedouble, ms);
    else
        fprintf(stderr,
                "agent-demo: run %s waits for its approval untimed, not up "
                "to %ld ms; give another --run for this one\n",
                run_id, ms);
    return true;
}

/* NAME in this program's directory. */
static int beside_self(char *out, size_t cap, const char *prefix,
                       const char *name)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    int w = snprintf(out, cap, "%s%s/%s", prefix, self, name);
    return w < 0 || (size_t)w >= cap ? -1 : 0;
}

static void print_json(const char *label, const cJSON *v)
{
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    printf("%s%s\n", label, s ? s : "?");
    cJSON_free(s);
}

/* The result of a completed run, or NULL. */
static const pl_step *last_step(const pl_outcome *o)
{
    size_t n = o->steps ? pl_steps_count(o->steps) : 0;
    return n ? pl_steps_at(o->steps, n - 1) : NULL;
}

/* The requests the scripted model at @p script answered: the lines of its
 * counter file, SCRIPT.served (policyledger_llm.h). */
static unsigned long long scripted_served(const char *script)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s.served", script);
    FILE *f = fopen(path, "rb");
    unsigned long long n = 0;
    for (int ch; f && (ch = getc(f)) != EOF;)
        n += ch == '\n';
    if (f)
        fclose(f);
    return n;
}

/* A timed approval's wait, and how to end it. */
static void print_waiting(int64_t wake_ms, const char *store,
                          const char *run_id)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t left = wake_ms -
                   ((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
    printf("waiting for approval: escalates in %lld ms unless approved\n",
           (long long)(left > 0 ? left : 0));
    printf("approve with: agent-demo --store %s --run %s --answer "
           "'{\"approved\": true}'\n",
           store, run_id);
}

/* What the run came to, and what its model calls cost. */
static void report(pl_engine *e, const pl_outcome *o, const char *run_id,
                   const char *model, const char *store)
{
    if (o->status == PL_RUN_COMPLETED) {
        const cJSON *r = pl_step_payload(pl_steps_at(o->steps,
                                                     pl_steps_count(o->steps) -
                                                         1));
        const cJSON *ans = cJSON_GetObjectItemCaseSensitive(r, "answer");
        if (cJSON_IsString(ans))
            printf("answer: %s\n", ans->valuestring);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "escalated")))
            printf("escalated: no approval came in time\n");
        print_json("result: ", r);
    } else if (o->status == PL_RUN_SUSPENDED) {
        print_json("waiting for approval: ", o->prompt);
        printf("resume token: %s\n", o->resume_token);
        printf("resume with: agent-demo --store %s --run %s --answer "
               "'{\"approved\": true}'\n",
               store, run_id);
    } else if (o->status == PL_RUN_WAITING) {
        print_waiting(o->wake_ms, store, run_id);
    } else if (o->status == PL_RUN_FAILED) {
        printf("reason: %s\n", o->reason ? o->reason : "?");
    }
    printf("run %s: %s\n", run_id, pl_run_status_name(o->status));
    pl_llm_tokens tok = PL_LLM_TOKENS_INIT;
    if (!pl_llm_run_tokens(&tok, e, run_id))
        printf("model calls recorded: %llu (%llu input, %llu output "
               "tokens)\n",
               (unsigned long long)tok.exchanges, (unsigned long long)tok.input,
               (unsigned long long)tok.output);
    if (!strncmp(model, "scripted://", 11))
        printf("scripted model requests served: %llu\n",
               scripted_served(model + 11));
    printf("this execution: calls executed %llu, served from the ledger "
           "%llu\n",
           (unsigned long long)o->calls_executed,
           (unsigned long long)o->calls_served);
}

/* Register the MCP servers of @p f; their standard error is appended to
 * STORE.mcp.log. */
static int mount_mcp(pl_mcp **out, pl_registry *reg, const mcp_flags *f,
                     const char *store, bool unchecked)
{
    char log[PATH_MAX];
    snprintf(log, sizeof log, "%s.mcp.log", store);
    pl_mcp_options o = PL_MCP_OPTIONS_INIT;
    o.stderr_path = log;
    o.unchecked_schemas = unchecked;
    for (size_t i = 0; i < f->n; i++) {
        int st = mcp_flags_register(&out[i], reg, f, i, &o);
        if (st)
            return st;
    }
    return PL_OK;
}

int main(int argc, char **argv)
{
    const char *store = "agent-demo.db", *model = NULL, *data = NULL;
    const char *question = DEFAULT_QUESTION, *run_id = "research-1";
    const char *answer_text = NULL, *token = NULL, *plugin = NULL;
    const char *question_given = NULL;
    long approval_timeout = -1;
    char model_buf[PATH_MAX + 16], data_buf[PATH_MAX], plugin_buf[PATH_MAX];
    demo d = {0, 0};
    bool stream = false, mcp_unchecked = false;
    static mcp_flags mcp_f; /* --mcp, --mcp-env, --mcp-token-env */
    char why[512];
    unsigned given = 0; /* the flags met, a bit each */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return help_written("agent-demo");
        }
        if (!strcmp(a, "--stream")) {
            stream = true;
            continue;
        }
        if (!strcmp(a, "--mcp-unchecked")) {
            mcp_unchecked = true;
            continue;
        }
        if (mcp_flags_takes(a)) {
            if (!v) {
                fprintf(stderr, "agent-demo: %s needs a value (see --help)\n",
                        a);
                return 2;
            }
            i++;
            if (mcp_flags_add(&mcp_f, a, v, why, sizeof why)) {
                fprintf(stderr, "agent-demo: %s\n", why);
                return 2;
            }
            continue;
        }
        static const char *const valued[] = {
            "--store",           "--model",  "--data",
            "--question",        "--run",    "--answer",
            "--token",           "--plugin", "--crash-after-steps",
            "--approval-timeout"};
        size_t k = 0, n = sizeof valued / sizeof valued[0];
        while (k < n && strcmp(a, valued[k]))
            k++;
        if (k == n)
            return bad_usage(a[0] == '-' ? "unknown option"
                                         : "unexpected argument",
                             a);
        if (given & 1u << k) {
            fprintf(stderr, "agent-demo: %s is given twice\n", a);
            return 2;
        }
        given |= 1u << k;
        if (!v) {
            fprintf(stderr, "agent-demo: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--store"))
            store = v;
        else if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--question"))
            question = question_given = v;
        else if (!strcmp(a, "--run"))
            run_id = v;
        else if (!strcmp(a, "--answer"))
            answer_text = v;
        else if (!strcmp(a, "--token"))
            token = v;
        else if (!strcmp(a, "--plugin")) {
            plugin = v;
        } else if (!strcmp(a, "--crash-after-steps")) {
            if (parse_long(v, &d.crash_after) || d.crash_after < 1) {
                fprintf(stderr,
                        "agent-demo: --crash-after-steps needs a number, "
                        "not '%s': a step boundary from 1\n",
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--approval-timeout")) {
            /* the agent's bound: a larger wait would start a run that
             * fails at once */
            if (parse_long(v, &approval_timeout) ||
                approval_timeout > 1000000000000L) {
                fprintf(stderr,
                        "agent-demo: --approval-timeout needs a number of "
                        "milliseconds, 0 to 1e12, not '%s'\n",
                        v);
                return 2;
            }
        }
    }
    if (mcp_flags_check(&mcp_f, why, sizeof why)) {
        fprintf(stderr, "agent-demo: %s\n", why);
        return 2;
    }
    bool mcp_fs = false; /* a server mounted as "fs" */
    for (size_t i = 0; i < mcp_f.n; i++)
        mcp_fs = mcp_fs || !strcmp(mcp_f.v[i].name, "fs");
    if (!*question) {
        fprintf(stderr, "agent-demo: --question needs some text\n");
        return 2;
    }
    if (!*run_id || strlen(run_id) > PL_MAX_RUN_ID) {
        fprintf(stderr, "agent-demo: --run needs an id of 1..%d bytes\n",
                PL_MAX_RUN_ID);
        return 2;
    }
    if (token && !answer_text) {
        fprintf(stderr, "agent-demo: --token goes with --answer\n");
        return 2;
    }
    if ((!model &&
         beside_self(model_buf, sizeof model_buf, "scripted://",
                     mcp_fs ? "agent/script-mcp.json" : "agent/script.json")) ||
        (!data && beside_self(data_buf, sizeof data_buf, "", "agent/data")) ||
        (!plugin &&
         beside_self(plugin_buf, sizeof plugin_buf, "", "agent-plugin.so"))) {
        fprintf(stderr, "agent-demo: cannot find this program's directory; "
                        "give --model, --data and --plugin\n");
        return 2;
    }
    model = model ? model : model_buf;
    data = data ? data : data_buf;
    plugin = plugin ? plugin : plugin_buf;
    cJSON *answer = NULL;
    if (answer_text) {
        answer = cJSON_Parse(answer_text);
        if (!cJSON_IsObject(answer)) {
            fprintf(stderr,
                    "agent-demo: --answer needs a JSON object, e.g. "
                    "'{\"approved\": true}', not '%s'\n",
                    answer_text);
            cJSON_Delete(answer);
            return 2;
        }
    }
    /* the plugin reads its configuration from here when it is loaded */
    if (setenv("AGENT_MODEL", model, 1) || setenv("AGENT_DATA", data, 1) ||
        (stream && setenv("AGENT_STREAM", "1", 1))) {
        fprintf(stderr, "agent-demo: cannot set AGENT_MODEL/AGENT_DATA\n");
        cJSON_Delete(answer);
        return 2;
    }

    pl_registry *reg = NULL;
    pl_mcp *mcp[MCP_FLAGS_MAX] = {NULL};
    pl_engine *e = NULL;
    pl_outcome *o = NULL;
    pl_run_info *info = NULL;
    cJSON *payload = NULL;
    int rc = 1, st = PL_OK;
    pl_engine_options eo = PL_ENGINE_OPTIONS_INIT;
    eo.on_event = on_event;
    eo.event_user = &d;
    if ((st = pl_registry_new(&reg)) || (st = pl_plugin_load(reg, plugin)))
        goto fail;
    if ((st = mount_mcp(mcp, reg, &mcp_f, store, mcp_unchecked))) {
        /* a spec or a name that is none, or a tool's schema refused
         * without --mcp-unchecked: usage */
        if (st == PL_EINVAL)
            rc = 2;
        if (st != PL_EINVAL || !strstr(pl_errmsg(), "inputSchema"))
            goto fail;
        fprintf(stderr,
                "agent-demo: %s (%s); --mcp-unchecked registers such a tool "
                "without its schema\n",
                pl_errmsg(), pl_status_name(st));
        goto done;
    }
    if ((st = pl_engine_open(&e, store, reg, &eo)) ||
        (st = pl_engine_set_wait_in_place(e, 0))) /* a timed wait parks */
        goto fail;

    st = pl_run_get(&info, e, run_id);
    if (st == PL_ENOTFOUND && answer) {
        st = pl_errorf(PL_ENOTFOUND, "no run '%s' to answer", run_id);
        goto fail;
    } else if (st == PL_ENOTFOUND) {
        printf("run %s: starting; question: %s\n", run_id, question);
        if ((st = pl_json_pack(&payload, "{s:s}", "question", question)) ||
            (approval_timeout >= 0 &&
             !cJSON_AddNumberToObject(payload, "approval_timeout_ms",
                                      (double)approval_timeout) &&
             (st = PL_ENOMEM)))
            goto fail;
        pl_action root = PL_ACTION_INIT;
        root.policy = "agent";
        root.payload = payload;
        pl_run_options ro = PL_RUN_OPTIONS_INIT;
        ro.run_id = run_id;
        st = pl_run_start(&o, e, &root, &ro);
    } else if (st) {
        goto fail;
    } else if (question_given && !same_question(info->payload, question)) {
        fprintf(stderr,
                "agent-demo: run %s asks another question; give another "
                "--run for this one\n",
                run_id);
        rc = 2;
        goto done;
    } else if (approval_timeout >= 0 &&
               other_timeout(info->payload, approval_timeout, run_id)) {
        rc = 2; /* the run's own, as its question */
        goto done;
    } else if (answer && info->status == PL_RUN_WAITING && !token) {
        /* a timed approval: the answer is an event, and the run goes on
         * here */
        printf("run %s: sending the answer %s\n", run_id, answer_text);
        st = pl_run_signal(&o, e, run_id, "approval", answer);
        if (!st && !o) { /* another process took the run first */
            printf("run %s: answer delivered\n", run_id);
            rc = 0;
            goto done;
        }
    } else if (answer) {
        if (!token && !(token = info->resume_token)) {
            st = pl_errorf(PL_ESTATE,
                           "run '%s' is %s, not waiting for an answer", run_id,
                           pl_run_status_name(info->status));
            goto fail;
        }
        printf("run %s: resuming with the answer %s\n", run_id, answer_text);
        st = pl_run_resume(&o, e, run_id, token, answer);
    } else if (info->status == PL_RUN_SUSPENDED) {
        print_json("waiting for approval: ", info->prompt);
        printf("run %s: suspended; resume with --answer JSON\n", run_id);
        rc = 0;
        goto done;
    } else {
        /* a running run's record counts its steps only at its owner's
         * heartbeats, which a crash cuts short: count what is stored */
        unsigned long long n = info->steps;
        if (info->status == PL_RUN_RUNNING) {
            n = 0;
            if ((st = pl_run_walk(e, run_id, count_step, &n)))
                goto fail;
        }
        printf("run %s: found %s with %llu durable steps%s; continuing\n",
               run_id, pl_run_status_name(info->status), n,
               info->status == PL_RUN_RUNNING && !info->owner_alive
                   ? " (its process died)"
                   : "");
        st = pl_run_continue(&o, e, run_id, NULL);
    }
    if (st)
        goto fail;
    report(e, o, run_id, model, store);
    rc = 0;
    if (o->status == PL_RUN_FAILED ||
        (o->status == PL_RUN_COMPLETED && last_step(o) &&
         pl_step_is_error(last_step(o))))
        rc = 1; /* failed, or completed with an error as its result */
    goto done;
fail:
    fprintf(stderr, "agent-demo: %s (%s)\n", pl_errmsg(), pl_status_name(st));
done:
    pl_run_info_free(info);
    pl_outcome_free(o);
    cJSON_Delete(payload);
    cJSON_Delete(answer);
    pl_engine_close(e);
    for (size_t i = 0; i < mcp_f.n; i++)
        pl_mcp_close(mcp[i]);
    pl_registry_free(reg);
    return rc;
}
