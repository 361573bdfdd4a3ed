#!/bin/sh
# The shared library exports exactly the functions the public headers
# declare: only pl_ followed by a letter, none missing, none beyond them
# (pl_plugin_init is declared for plugins to define, not the library).
# usage: check_exports.sh LIBRARY INCLUDE_DIR [CFLAGS...]
set -eu
lib=$1
inc=$2
shift 2
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^pl_[a-z]' | grep -v '^$' || true)
if [ -n "$bad" ]; then
  echo "symbols exported beyond the public API:"; echo "$bad"; exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '{print $3}' | grep '^pl_' | sort -u >"$tmp/exported"
# Declarations, from the preprocessed headers: a name right before "(",
# after a type (function pointer types are "(*name)" and do not match).
printf '#include <policyledger.h>\n#include <policyledger_llm.h>\n#include <policyledger_mcp.h>\n' |
  ${CC:-cc} -E -P -I"$inc" "$@" -x c - | tr -s ' \n' ' ' |
  grep -oE '[A-Za-z0-9_*] +\**pl_[a-z][a-z0-9_]* *\(' |
  sed -E 's/.*(pl_[a-z][a-z0-9_]*) *\(/\1/' | grep -vx 'pl_plugin_init' |
  sort -u >"$tmp/declared"
if ! cmp -s "$tmp/declared" "$tmp/exported"; then
  echo "declared in include/ (<) and exported (>) differ:"
  diff "$tmp/declared" "$tmp/exported" || true
  exit 1
fi
echo "ok: $(wc -l <"$tmp/exported") public symbols, each declared in include/"
