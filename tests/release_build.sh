#!/bin/sh
# The library and its tools also build as a Release (-O3) build: optimised
# builds warn where the default one does not, and warnings are errors.
#   release_build.sh SRC [CMAKE_OPTION...]   the options of the build tree
# that runs it (its optional parts), so that each configuration the suite
# is built in is checked once, not the default one twice.
# With PL_RELEASE_MINIMAL_BUILT=1 (.ci/run: the same run builds the
# minimal tree, a Release build too, scripts/minimal.cmake) it compiles
# only the translation units that tree does not compile as this one would
# (tests/release_units.py); that tree's build checks the others.
set -eu
src=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
if [ "${PL_RELEASE_MINIMAL_BUILT:-0}" != 1 ]; then
  cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DPL_BUILD_TESTS=OFF \
        "$@" >/dev/null
  cmake --build "$dir" -j2 >/dev/null
  echo "ok: Release build"
  exit 0
fi
cmake -S "$src" -B "$dir/full" -G "Unix Makefiles" \
      -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_BUILD_TYPE=Release \
      -DPL_BUILD_TESTS=OFF "$@" >/dev/null
cmake -S "$src" -B "$dir/min" -G "Unix Makefiles" \
      -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -C "$src/scripts/minimal.cmake" \
      >/dev/null
python3 "$(dirname "$0")/release_units.py" "$dir/full" "$dir/min"
