/*
 * web_guard.h -- web_guard.c's part of the server, as libmicrohttpd calls
 * it (web_http.c registers the callbacks).
 */
#ifndef PL_WEB_GUARD_H
#define PL_WEB_GUARD_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "web.h"

/* False for a POST a browser says came from a page of another origin. */
bool web_same_origin(const web_req *r);
/* The name of a query parameter the API reads given twice, or NULL. */
const char *web_arg_twice(const web_req *r);
/* MHD_OPTION_UNESCAPE_CALLBACK: %XX decoded, but for %00. */
size_t web_unescape(void *cls, struct MHD_Connection *c, char *s);

/* MHD_OPTION_URI_LOG_CALLBACK: a new request's web_req (web.h), NULL
 * without memory.  A query of over WEB_ARGS_MAX parameters is dropped
 * before libmicrohttpd reads it, their number kept in the web_req's args:
 * the request is to be refused. */
void *web_uri_seen(void *cls, const char *uri, struct MHD_Connection *c);

/* A place for an export, made and downloaded: NULL when WEB_EXPORTS are
 * taken, or WEB_EXPORTS_PER_IP of them by @p client's address (*mine
 * true; a NULL address is one unknown address). */
web_slot *web_export_enter(const struct sockaddr *client, bool *mine);
void web_export_leave(web_slot *s);

/* MHD_OPTION_NOTIFY_CONNECTION: each connection timed while it has no
 * whole request; web_conn_busy() once it has one, web_conn_idle() once it
 * is answered.  The guard's thread cuts one WEB_REQUEST_S late, and one
 * answering whose client has taken none of the bytes waiting for it for
 * the stall bound. */
void web_on_connection(void *cls, struct MHD_Connection *c, void **ctx,
                       enum MHD_ConnectionNotificationCode code);
void web_conn_busy(struct MHD_Connection *c);
void web_conn_idle(struct MHD_Connection *c);
/* The guard's thread (without it, says so: libmicrohttpd's own timeout
 * still holds), @p stall_s the stall bound in seconds; @p on_cut(@p arg)
 * after it cut a connection answering (wakes an event stream waiting). */
bool web_guard_start(unsigned stall_s, void (*on_cut)(void *), void *arg);
void web_guard_stop(void);

#endif /* PL_WEB_GUARD_H */
