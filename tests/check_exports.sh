#!/bin/sh
# Only the public API (pl_ followed by a letter) may leave the shared library.
set -eu
lib=$1
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^pl_[a-z]' | grep -v '^$' || true)
if [ -n "$bad" ]; then
  echo "symbols exported beyond the public API:"; echo "$bad"; exit 1
fi
count=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -c '^pl_[a-z]')
echo "ok: $count public symbols, nothing else"
