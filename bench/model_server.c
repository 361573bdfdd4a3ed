/*
 * model_server.c -- pl-bench's loopback model server (bench.h): canned
 * OpenAI chat-completions answers, whole or streamed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "bench.h"

bench_srv g_srv = {.fd = -1};

static bool srv_write(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* One chunk of a chunked body. */
static bool srv_chunk(int fd, const char *p, size_t n)
{
    char head[24];
    int hl = snprintf(head, sizeof head, "%zx\r\n", n);
    return srv_write(fd, head, (size_t)hl) && srv_write(fd, p, n) &&
           srv_write(fd, "\r\n", 2);
}

/* A streamed answer: STREAM_DELTAS text deltas, each an event and a
 * chunk, its usage, [DONE]. */
static bool srv_stream(int fd, long n)
{
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: "
                               "text/event-stream\r\nTransfer-Encoding: "
                               "chunked\r\n\r\n";
    if (!srv_write(fd, head, sizeof head - 1))
        return false;
    char ev[300];
    for (int k = 0; k < STREAM_DELTAS; k++) {
        int l = snprintf(ev, sizeof ev,
                         "data: {\"id\":\"b%ld\",\"object\":"
                         "\"chat.completion.chunk\",\"choices\":[{"
                         "\"index\":0,\"delta\":{\"content\":\"word%d \"}}]}"
                         "\n\n",
                         n, k);
        if (!srv_chunk(fd, ev, (size_t)l))
            return false;
    }
    static const char tail[] =
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":"
        "\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":"
        "20,\"completion_tokens\":8}}\n\ndata: [DONE]\n\n";
    return srv_chunk(fd, tail, sizeof tail - 1) &&
           srv_write(fd, "0\r\n\r\n", 5);
}

/* Serve one connection's requests until the client closes it. */
static void srv_conn(int fd)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        char *end = NULL;
        size_t body = 0;
        bool continued = false;
        for (;;) { /* the headers, then Content-Length bytes */
            if (!end && len >= 4) {
                buf[len] = '\0';
                char *h = strstr(buf, "\r\n\r\n");
                if (h) {
                    end = h + 4;
                    const char *cl = strcasestr(buf, "\r\ncontent-length:");
                    body = cl && cl < h ? strtoul(cl + 17, NULL, 10) : 0;
                }
            }
            if (end && len >= (size_t)(end - buf) + body)
                break;
            if (end && !continued) { /* curl asks before a large body */
                continued = true;
                const char *ex = strcasestr(buf, "\r\nexpect: 100-continue");
                if (ex && ex < end &&
                    !srv_write(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25))
                    goto done;
            }
            if (len + 1 >= cap) {
                char *g = realloc(buf, cap * 2);
                if (!g)
                    goto done;
                buf = g;
                cap *= 2;
                end = NULL;
                continue;
            }
            ssize_t r = read(fd, buf + len, cap - len - 1);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                goto done;
            len += (size_t)r;
        }
        size_t used = (size_t)(end - buf) + body;
        long n = atomic_fetch_add(&g_srv.requests, 1);
        if (memmem(end, body, "\"stream\":true", 13)) {
            if (!srv_stream(fd, n))
                break;
            memmove(buf, buf + used, len - used);
            len -= used;
            continue;
        }
        char msg[600], head[160];
        if (atomic_fetch_sub(&g_srv.tools, 1) > 0)
            snprintf(msg, sizeof msg,
                     "{\"id\":\"b%ld\",\"object\":\"chat.completion\","
                     "\"choices\":[{\"index\":0,\"message\":{\"role\":"
                     "\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
                     "\"call_%ld\",\"type\":\"function\",\"function\":{"
                     "\"name\":\"tool\",\"arguments\":\"{\\\"i\\\":%ld}\"}}]},"
                     "\"finish_reason\":\"tool_calls\"}],\"usage\":{"
                     "\"prompt_tokens\":20,\"completion_tokens\":8,"
                     "\"total_tokens\":28}}",
                     n, n, n);
        else
            snprintf(msg, sizeof msg,
                     "{\"id\":\"b%ld\",\"object\":\"chat.completion\","
                     "\"choices\":[{\"index\":0,\"message\":{\"role\":"
                     "\"assistant\",\"content\":\"done\"},\"finish_reason\":"
                     "\"stop\"}],\"usage\":{\"prompt_tokens\":20,"
                     "\"completion_tokens\":1,\"total_tokens\":21}}",
                     n);
        int hl = snprintf(head, sizeof head,
                          "HTTP/1.1 200 OK\r\nContent-Type: application/json"
                          "\r\nContent-Length: %zu\r\n\r\n",
                          strlen(msg));
        if (!srv_write(fd, head, (size_t)hl) ||
            !srv_write(fd, msg, strlen(msg)))
            break;
        memmove(buf, buf + used, len - used);
        len -= used;
    }
done:
    free(buf);
    close(fd);
}

/* A connection's thread: its slot in g_srv.conns. */
static void *srv_conn_main(void *arg)
{
    atomic_int *slot = arg;
    srv_conn(atomic_load(slot));
    atomic_store(slot, -1);
    return NULL;
}

/* Accept connections, each served by a thread of its own (a client may
 * hold several: the LLM policy's and a bare loop's). */
static void *srv_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_srv.stop)) {
        int c = accept(g_srv.fd, NULL, NULL);
        if (c < 0)
            continue;
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        atomic_int *slot = NULL;
        for (int i = 0; !slot && i < SRV_CONNS; i++) {
            int free_slot = -1;
            if (atomic_compare_exchange_strong(&g_srv.conns[i], &free_slot, c))
                slot = &g_srv.conns[i];
        }
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (!slot || atomic_load(&g_srv.stop) ||
            pthread_create(&th, &at, srv_conn_main, slot)) {
            if (slot)
                atomic_store(slot, -1);
            close(c);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

void srv_start(void)
{
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    g_srv.fd = socket(AF_INET, SOCK_STREAM, 0);
    if (g_srv.fd < 0 || bind(g_srv.fd, (struct sockaddr *)&a, sizeof a) ||
        listen(g_srv.fd, 16) ||
        getsockname(g_srv.fd, (struct sockaddr *)&a, &al))
        die("W5 model server");
    g_srv.port = ntohs(a.sin_port);
    for (int i = 0; i < SRV_CONNS; i++)
        atomic_store(&g_srv.conns[i], -1);
    if (pthread_create(&g_srv.th, NULL, srv_main, NULL))
        die("W5 model server thread");
}

void srv_stop(void)
{
    atomic_store(&g_srv.stop, true);
    shutdown(g_srv.fd, SHUT_RDWR);
    /* a client may keep its connections open (a connection cache) */
    for (int i = 0; i < SRV_CONNS; i++) {
        int open_conn = atomic_load(&g_srv.conns[i]);
        if (open_conn >= 0)
            shutdown(open_conn, SHUT_RDWR);
    }
    /* wake accept() with a connection of our own */
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)g_srv.port);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c >= 0) {
        if (connect(c, (struct sockaddr *)&a, sizeof a) == 0)
            close(c);
        else
            close(c);
    }
    pthread_join(g_srv.th, NULL);
    close(g_srv.fd);
}
