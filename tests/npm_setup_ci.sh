#!/bin/sh
# npm_setup.sh without npm or node: it says which tests skip and succeeds,
# but with PL_NPM_REQUIRED=1 it fails (a skip there would hide a missing install
# step); packages already in its folder are taken as they are, scoped
# names and name@version alike.
#   npm_setup_ci.sh tests/npm_setup.sh
set -eu
setup=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/bin" # a PATH with neither npm nor node
sh=$(command -v sh)
run() { PATH="$dir/bin" PL_NPM_REQUIRED="$1" "$sh" "$setup" "$dir/npm" "the tests" \
          left-pad@1 @scope/pkg >"$dir/out" 2>&1; }

run "" || { echo "FAIL: without CI, it failed:"; cat "$dir/out"; exit 1; }
grep -q "no npm or node.*the tests skip" "$dir/out" ||
  { echo "FAIL: it did not say which tests skip, and why:"; cat "$dir/out"; exit 1; }
if run 1; then
  echo "FAIL: with PL_NPM_REQUIRED=1, it passed:"; cat "$dir/out"; exit 1
fi
grep -q "PL_NPM_REQUIRED=1" "$dir/out" ||
  { echo "FAIL: with PL_NPM_REQUIRED=1, it did not say why it failed:"; cat "$dir/out"; exit 1; }

for p in left-pad @scope/pkg; do
  mkdir -p "$dir/npm/node_modules/$p"
  echo '{}' >"$dir/npm/node_modules/$p/package.json"
done
run 1 || { echo "FAIL: installed packages not found:"; cat "$dir/out"; exit 1; }
echo "ok: without npm the tests skip, saying why, and with PL_NPM_REQUIRED=1 fail;" \
     "installed packages are found"
