#!/bin/sh
# The library and its tools also build as a Release (-O3) build: optimised
# builds warn where the default one does not, and warnings are errors.
#   release_build.sh SRC [CMAKE_OPTION...]   the options of the build tree
# that runs it (its optional parts), so that each configuration the suite
# is built in is checked once, not the default one twice.
set -eu
src=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPL_BUILD_TESTS=OFF \
      "$@" >/dev/null
cmake --build "$dir" -j2 >/dev/null
echo "ok: Release build"
