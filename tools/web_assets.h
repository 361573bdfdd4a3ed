/*
 * web_assets.h -- the page's files, embedded at build time: the build
 * writes web_assets.c from every file of tools/web/ (tools/web/embed.cmake).
 */
#ifndef PL_WEB_ASSETS_H
#define PL_WEB_ASSETS_H

#include <stddef.h>

typedef struct web_asset {
    const char *path; /* "/index.html" */
    const unsigned char *bytes;
    size_t len;
} web_asset;

/* Ends with an entry whose path is NULL. */
extern const web_asset web_assets[];

#endif /* PL_WEB_ASSETS_H */
