#!/bin/sh
# npm_setup.sh DIR WHAT PACKAGE...: install the npm PACKAGEs (name or
# name@version) under DIR, once; the tests named by WHAT need them
# (tests/CMakeLists.txt and tests/web/CMakeLists.txt make this their
# fixtures' setup).  Without npm, node or the registry, say so: the tests
# then skip, saying why, and this succeeds; but with PL_NPM_REQUIRED=1 (.ci/run
# sets it when the registry answers) it fails, and so do they, since a skip
# there would hide a missing install step.
dir=$1 what=$2
shift 2
give_up() {
  echo "npm_setup: $1: $what skip"
  if [ "${PL_NPM_REQUIRED:-}" = 1 ]; then
    echo "npm_setup: PL_NPM_REQUIRED=1, where nothing may skip: failed" >&2
    exit 1
  fi
  exit 0
}
installed() {
  for p in "$@"; do
    case $p in
      ?*@*) name=${p%@*} ;;
      *) name=$p ;;
    esac
    [ -f "$dir/node_modules/$name/package.json" ] || return 1
  done
}
if installed "$@"; then
  echo "npm_setup: $* installed in $dir"
  exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  give_up "no npm or node (scripts/deps.sh --test installs them)"
fi
# the browser is Debian's chromium, never one playwright would download;
# what an earlier build tree installed comes from npm's cache
if ! PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 600 npm install --prefer-offline \
     --prefix "$dir" --no-audit --no-fund "$@"; then
  give_up "npm could not install $*"
fi
installed "$@" || give_up "npm installed $*, yet they are not in $dir"
