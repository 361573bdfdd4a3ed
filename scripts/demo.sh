#!/usr/bin/env bash
# Install what is missing, build, and run the demos: first the durable
# research-and-approve agent (scripts/agent-demo.sh: a model and its tools,
# killed mid-run, finished by ledger-replay, approved by a human), offline;
# then a durable order workflow (reserve stock, charge a card, ship) on an
# LMDB file, killed with SIGKILL in the middle and finished by running it
# again.
#   scripts/demo.sh          (no arguments: it installs, builds and runs)
set -euo pipefail
case ${1-} in
  "") ;;
  -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" 2>/dev/null ||
        { echo "demo.sh: cannot write the help" >&2; exit 1; }
      exit 0 ;;
  *) echo "demo.sh: unexpected argument '$1': it takes none (see --help);" \
          "scripts/agent-demo.sh takes the agent's options" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DPL_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null

echo "######## The agent: research, a crash, recovery, approval ########"
scripts/agent-demo.sh build
echo
echo "######## The order workflow: a crash and its recovery ########"

demo=build/examples/order-demo
dir=$(mktemp -d "${TMPDIR:-/tmp}/policyledger-demo.XXXXXX")
store="$dir/orders.db" effects="$dir/effects.log"
args=(--store "$store" --effects "$effects")

echo "== 1. Run the order, and kill the process (SIGKILL) at step boundary 8:"
echo "==    after the card was charged, before that result was durable."
"$demo" "${args[@]}" --crash-after 8 || echo "   (the process died: exit status $?)"
echo
echo "== 2. Run the same command again.  The run is found, replayed from its"
echo "==    ledger, and finished.  The charge was in flight at the crash: it is"
echo "==    re-run with its idempotency key, and the provider charges it once."
"$demo" "${args[@]}"
echo
echo "== 3. Once more: a completed run replays from its ledger and does nothing."
"$demo" "${args[@]}" --quiet
echo
echo "The store is $store; the side effects are in $effects."
if [ -x build/tools/ledger-web ]; then
  echo "See it in a browser (then open the URL it prints):"
  echo "  ORDER_EFFECTS=$effects build/tools/ledger-web $store --plugin build/examples/order-plugin.so"
fi
