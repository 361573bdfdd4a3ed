#!/bin/sh
# scripts/checksrc.sh finds a banned call, says where and what to use
# instead, and exits 1; it passes a clean file, banned names in comments,
# strings and member calls included, with 0.
set -eu
src=$1
check="$src/scripts/checksrc.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

cat >"$dir/bad.c" <<'EOF'
#include <string.h>

void f(char *dst, const char *src);
void f(char *dst, const char *src)
{
    strcpy(dst, src);
}
EOF
status=0
bash "$check" "$dir/bad.c" >"$dir/out" 2>&1 || status=$?
if [ "$status" -ne 1 ]; then
  echo "FAIL: a file with strcpy() gave status $status, expected 1" >&2
  cat "$dir/out" >&2
  exit 1
fi
grep -q "bad.c:6: banned call strcpy (use snprintf" "$dir/out" || {
  echo "FAIL: no 'file:line: banned call NAME (use ...)' line:" >&2
  cat "$dir/out" >&2
  exit 1
}

cat >"$dir/clean.c" <<'EOF'
#include <stdio.h>

/* strcpy(dst, src) and sprintf(buf, ...) are banned;
   so is atoi(s). */
struct ops { int (*atoi)(const char *); };
int g(char *dst, size_t n, const char *src, const struct ops *o);
int g(char *dst, size_t n, const char *src, const struct ops *o)
{
    char q = '"'; // gets(line) too
    (void)q;
    snprintf(dst, n, "%s", "strcat(a, b) \" gets(x)");
    return o->atoi(src) + snprintf(dst, n, "%s", src);
}
EOF
status=0
bash "$check" "$dir/clean.c" >"$dir/out" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  echo "FAIL: a clean file gave status $status, expected 0" >&2
  cat "$dir/out" >&2
  exit 1
fi
echo "ok: checksrc reports a banned call and passes a clean file"
