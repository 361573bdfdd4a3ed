#!/usr/bin/env bash
# Format our C with clang-format and the repository's .clang-format.
#   scripts/format.sh           reformat every file of ours in place
#   scripts/format.sh --check   change nothing; list the files that are not
#                               formatted and exit 1 if there are any
# Ours: the files scripts/c-sources.sh lists.  The style was tuned with
# clang-format 14 (Debian 12); other versions may format a little otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=fix
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac

clang_format=${CLANG_FORMAT:-clang-format}
command -v "$clang_format" >/dev/null || {
  echo "format: $clang_format not found (scripts/deps.sh --test installs it)" >&2
  exit 2
}

files=()
while IFS= read -r -d '' f; do
  files+=("$f")
done < <(scripts/c-sources.sh -z)
[ ${#files[@]} -eq 0 ] && exit 0

if [ "$mode" = fix ]; then
  "$clang_format" -i --style=file "${files[@]}"
  exit 0
fi

# One clang-format for every file (a process per file took half a minute).
# Anything but a formatting difference (a bad .clang-format, an unreadable
# file) is an error of its own, not an unformatted file.
if out=$("$clang_format" --dry-run --Werror --style=file "${files[@]}" 2>&1); then
  exit 0
fi
mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*\[-Wclang-format-violations\]$/\1/p' \
                     <<<"$out" | sort -u)
if [ ${#bad[@]} -eq 0 ]; then
  printf '%s\n' "$out" >&2
  exit 2
fi
echo "format: ${#bad[@]} file(s) not formatted (run scripts/format.sh):" >&2
printf '  %s\n' "${bad[@]}" >&2
exit 1
