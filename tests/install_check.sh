#!/bin/sh
# `cmake --install` gives a usable package: a program compiles against the
# installed header with the installed pkg-config file, links the installed
# shared library, and runs; the licence is installed with it.
set -eu
build=$1
src=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake --install "$build" --prefix "$dir/prefix" >/dev/null
pcdir=$(dirname "$(find "$dir/prefix" -name policyledger.pc | head -n 1)")
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs policyledger)
cc -std=c11 -Wall -Wextra -Werror "$src/examples/quickstart.c" $flags -o "$dir/qs"
libdir=$(dirname "$(find "$dir/prefix" -name 'libpolicyledger.so*' | head -n 1)")
LD_LIBRARY_PATH="$libdir" "$dir/qs" "$dir/qs.db" | grep -q 'completed {"total":6}'
test -f "$libdir/libpolicyledger.a"
test -n "$(find "$dir/prefix" -path '*/doc/policyledger/LICENSE')"
echo "ok: installed package builds and runs the quickstart ($flags)"
