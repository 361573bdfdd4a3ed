#!/usr/bin/env bash
# List our C sources, one per line (-z: NUL-terminated), sorted: the headers
# of include/ and its folders, and every *.c / *.h under the source folders
# below, of those that exist.
# Build trees (build*/) and everything else are not ours to check.
#   scripts/c-sources.sh [-z]
set -euo pipefail
cd "$(dirname "$0")/.."

sep='\n'
case "${1:-}" in
  "") ;;
  -z) sep='\0' ;;
  *) echo "usage: scripts/c-sources.sh [-z]" >&2; exit 2 ;;
esac

dirs=()
for d in core ledger base policies tools examples tests bench fuzz; do
  [ -d "$d" ] && dirs+=("$d")
done
{
  [ -d include ] && find include -type f -name '*.h' -print0
  [ ${#dirs[@]} -eq 0 ] ||
    find "${dirs[@]}" -type d -name 'build*' -prune -o \
      -type f \( -name '*.c' -o -name '*.h' \) -print0
} | sort -z | tr '\0' "$sep"
