#!/bin/sh
# The example programs, the demo scripts and test.sh, fuzz.sh and soak.sh
# given what they cannot use: an
# unknown flag, a flag without its value, a stray argument, a bad --mcp
# spec, a store path that cannot be written, a store of the wrong kind.
# Each says so in one line on stderr, prints nothing else, and exits as it
# documents (2 bad usage, 1 what it cannot open), never killed by a signal,
# never 0.
#   demo_errors.sh SOURCE_DIR BUILD_DIR ORDER_DEMO AGENT_DEMO LLM_AGENT REMINDER
#                  QUICKSTART [nocurl]
set -eu
src=$1 build=$2 od=$3 ad=$4 la=$5 rm_=$6 qs=$7 curl=${8:-curl}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
echo "not a store" >junk.db

# one_line STATUS PATTERN CMD...: CMD exits STATUS with one line on stderr
# holding PATTERN, and nothing on stdout.
one_line() {
  want=$1 pat=$2; shift 2
  set +e; "$@" >out 2>err; got=$?; set -e
  if [ "$got" -ne "$want" ] || [ -s out ] || [ "$(wc -l <err)" -ne 1 ] ||
     ! grep -q -- "$pat" err; then
    echo "FAIL: $* exited $got (expected $want, one line saying: $pat)"
    echo "stdout:"; cat out; echo "stderr:"; cat err; exit 1
  fi
}
# nothing made: no store under a name that was a flag
made_nothing() {
  for f in "$@"; do
    [ ! -e "$f" ] || { echo "FAIL: $f was made"; exit 1; }
  done
}

# order-demo
one_line 2 "unknown option '--bogus' (see --help)" "$od" --bogus
one_line 2 "unknown option '--bogus' (see --help)" "$od" --bogus x
one_line 2 "unexpected argument 'orders.db'" "$od" orders.db
one_line 2 "--store needs a value" "$od" --store
one_line 2 "needs a number, not '-1'" "$od" --crash-after -1
# boundaries count from 1: a crash at boundary 0 would never come
one_line 2 "needs a number, not '0': a step boundary from 1" "$od" --crash-after 0
one_line 2 "unknown durability 'fast'" "$od" --durability fast
# a flag of one value given twice: refused, not the last one taken
one_line 2 "--order is given twice" "$od" --store o.db --order A --order B
one_line 2 "--store is given twice" "$od" --store o.db --store p.db
# an order id is the tail of the run's id: refused before a store is made
one_line 2 "bad order id" "$od" --store o.db --order ''
one_line 2 "bad order id" "$od" --store o.db --order 'a b'
one_line 2 "bad order id" "$od" --store o.db --order "$(printf 'a\nb')"
one_line 2 "order id is too long" "$od" --store o.db \
  --order "$(printf 'x%.0s' $(seq 200))"
made_nothing o.db
one_line 1 "its directory does not exist" "$od" --store "$dir/none/o.db" --quiet
one_line 1 "no file can be made in its directory" "$od" --store /proc/o.db --quiet
one_line 1 "'junk.db' is not an LMDB store" "$od" --store junk.db --quiet
# (a build without PostgreSQL says so instead)
one_line 1 "cannot connect: .* refused\|built without PostgreSQL" "$od" --quiet --effects e \
  --store "postgresql://nobody@127.0.0.1:1/none?connect_timeout=5"
one_line 1 "--effects '$dir/none/fx'" "$od" --store o.db --effects "$dir/none/fx"
made_nothing o.db
# effects that cannot be written once open: the run ends in an error
# result, which is no order done
set +e; "$od" --store full.db --effects /dev/full --quiet >out 2>&1; got=$?; set -e
[ "$got" -eq 1 ] && grep -q '"error":true' out || {
  echo "FAIL: order-demo with unwritable effects exited $got"; cat out; exit 1; }
made_nothing --bogus
# a crashed order says how many of its steps are durable, counted, not the
# run record's count at its last heartbeat (0 this early)
set +e; "$od" --store c.db --effects c.fx --crash-after 5 --quiet >/dev/null 2>&1
"$od" --store c.db --effects c.fx >out 2>&1; got=$?; set -e
[ "$got" -eq 0 ] &&
  grep -q 'found with status running, 3 durable steps (its process died)' out || {
  echo "FAIL: order-demo after a crash at boundary 5 exited $got"; cat out; exit 1; }
# a run started with --effects FILE and finished by another process: the
# plugin there takes the file from ORDER_EFFECTS, which --help says (the
# run does not record it); so set, the charge in flight at the crash
# (boundary 8) is made once, in FILE, and no other file is written
"$od" --help >out
grep -q 'ORDER_EFFECTS=FILE too' out || {
  echo "FAIL: order-demo --help does not say ORDER_EFFECTS"; cat out; exit 1; }
others=$(cat ./*.effects 2>/dev/null || true)
set +e; "$od" --store f.db --effects f.fx --crash-after 8 --quiet >/dev/null 2>&1
set -e
[ "$(grep -c '^charge_card ' f.fx)" -eq 1 ] || {
  echo "FAIL: no charge in flight at boundary 8:"; cat f.fx; exit 1; }
ORDER_EFFECTS=f.fx "$build/tools/ledger-replay" f.db \
  --plugin "$build/examples/order-plugin.so" --all >out 2>&1 || {
  echo "FAIL: ledger-replay --all of the crashed order"; cat out; exit 1; }
[ "$(grep -c '^charge_card ' f.fx)" -eq 1 ] && grep -q '^ship ' f.fx &&
  [ "$(cat ./*.effects 2>/dev/null || true)" = "$others" ] || {
  echo "FAIL: the order's effects:"; cat f.fx; ls; exit 1; }

# agent-demo (its own story of bad answers and models is agent_errors.sh)
one_line 2 "unknown option '--offline' (see --help)" "$ad" --offline
one_line 2 "unexpected argument 'x.db'" "$ad" x.db
one_line 2 "--mcp needs a value" "$ad" --mcp
one_line 2 "needs a number, not '0': a step boundary from 1" "$ad" --crash-after-steps 0
one_line 2 "--run is given twice" "$ad" --store a.db --run r1 --run r2
one_line 2 "--answer is given twice" "$ad" --store a.db --answer '{}' \
  --answer '{"approved": true}'
one_line 2 "--mcp needs NAME=SPEC" "$ad" --store a.db --mcp fs
one_line 2 "--mcp needs NAME=SPEC" "$ad" --store a.db \
  --mcp "$(printf 'n%.0s' $(seq 70))=stdio:true"
# --mcp-env and --mcp-token-env (tools/mcp_flags.c, as ledger-replay's)
one_line 2 "--mcp-env needs NAME=VAR" "$ad" --store a.db --mcp-env PATH
one_line 2 "no --mcp NAME=SPEC names that server" "$ad" --store a.db \
  --mcp-env fs=PATH
one_line 2 "PL_UNSET_FOR_THE_TEST is not set" "$ad" --store a.db \
  --mcp fs=stdio:true --mcp-env fs=PL_UNSET_FOR_THE_TEST
one_line 2 "is not an http(s):// endpoint" "$ad" --store a.db \
  --mcp fs=stdio:true --mcp-token-env fs=PATH
# past its options the demo loads its plugin, whose tools need libcurl: a
# build without it says so, in one line
if [ "$curl" = curl ]; then
  one_line 2 "expected \"stdio:COMMAND ARG...\"" "$ad" --store a.db --mcp fs=nonsense
  one_line 2 "no command" "$ad" --store a.db --mcp fs=stdio:
  one_line 2 "no host" "$ad" --store a.db --mcp fs=http://
  one_line 2 "no host" "$ad" --store a.db --mcp fs=https:///mcp
  one_line 2 "MCP server name 'a.b'" "$ad" --store a.db --mcp a.b=stdio:true
  one_line 2 "--run needs an id" "$ad" --store a.db --run ''
  one_line 1 "'junk.db' is not an LMDB store" "$ad" --store junk.db
else
  one_line 1 "built without libcurl" "$ad" --store a.db --mcp fs=nonsense
fi
made_nothing --offline x.db

# llm-agent, reminder
one_line 2 "unknown option '--bogus'" "$la" --bogus m q
one_line 2 "usage: llm-agent" "$la" l.db
one_line 1 "'junk.db' is not an LMDB store" "$la" junk.db scripted://x q
"$la" --help | grep -q '^usage: llm-agent STORE MODEL_URL QUESTION$'
one_line 2 "unknown option '--help-me'" "$rm_" --help-me
one_line 2 "not 'abc'" "$rm_" r.db abc
one_line 2 "not '-5'" "$rm_" r.db -5
one_line 2 "not '0'" "$rm_" r.db 0
one_line 2 "too many arguments" "$rm_" r.db 50 more
one_line 1 "'junk.db' is not an LMDB store" "$rm_" junk.db 50
"$rm_" --help | grep -q '^usage: reminder \[STORE\] \[PERIOD_MS\]'
made_nothing --bogus --help-me --help l.db r.db

# quickstart (the README's program, kept to its point): any flag, --help
# included, or a second argument is usage
one_line 2 "usage: .*quickstart \\[STORE\\]" "$qs" --help
one_line 2 "usage: .*quickstart \\[STORE\\]" "$qs" -h
one_line 2 "usage: .*quickstart \\[STORE\\]" "$qs" q.db more
one_line 1 "'junk.db' is not an LMDB store" "$qs" junk.db
made_nothing --help q.db

# the scripts: demo.sh takes no argument (a copy of it, where an argument
# not refused would find no deps.sh to run, rather than building), and
# agent-demo.sh only its own
mkdir -p copy/scripts && cp "$src/scripts/demo.sh" copy/scripts/
one_line 2 "unexpected argument '--stream'" bash copy/scripts/demo.sh --stream
bash copy/scripts/demo.sh --help | grep -q 'Install what is missing'
# test.sh, fuzz.sh and soak.sh refuse a bad argument before they install
# or build anything (copies again: no deps.sh, no tree to build)
for sc in test.sh fuzz.sh soak.sh; do cp "$src/scripts/$sc" copy/scripts/; done
one_line 2 "usage: scripts/test.sh" bash copy/scripts/test.sh --bogus
one_line 2 "usage: scripts/test.sh" bash copy/scripts/test.sh --sanitize --tsan
one_line 2 "usage: scripts/fuzz.sh" bash copy/scripts/fuzz.sh --bogus
one_line 2 "usage: scripts/fuzz.sh" bash copy/scripts/fuzz.sh 5m
one_line 2 "no harness 'fuzz_nope'" bash copy/scripts/fuzz.sh 10 fuzz_nope
one_line 2 "usage: scripts/fuzz.sh" bash copy/scripts/fuzz.sh --build 10
one_line 2 "usage: scripts/soak.sh" bash copy/scripts/soak.sh 5m
one_line 2 "usage: scripts/soak.sh" bash copy/scripts/soak.sh 10 20
ag=$src/scripts/agent-demo.sh
one_line 2 "unknown option '--offline'" bash "$ag" --offline "$build"
one_line 2 "--mcp takes no value here" bash "$ag" --mcp fs=stdio:x "$build"
one_line 2 "no build directory '$dir/none'" bash "$ag" "$dir/none"
one_line 2 "one BUILD_DIR" bash "$ag" "$build" "$build"
export AGENT_DEMO_DIR="$dir/junk.db" # a file, where a directory goes
one_line 1 "cannot write the store's directory" bash "$ag" "$build"
# every other example's --help: what it takes, on stdout, nothing on
# stderr, exit 0 (a --help asked for is no usage error)
for ex in "$od" "$ad" "$la" "$rm_"; do
  set +e; "$ex" --help >out 2>err; got=$?; set -e
  if [ "$got" -ne 0 ] || [ -s err ] || ! grep -q '^usage: ' out; then
    echo "FAIL: $ex --help exited $got"; cat out err; exit 1
  fi
done
# a --help that cannot be written (a full disk) is a failure said in one
# line, exit 1, never 0 with the text lost; the scripts' too
if [ -w /dev/full ]; then
  for ex in "$od" "$ad" "$la" "$rm_" "bash $src/scripts/demo.sh" "bash $ag"; do
    set +e; $ex --help >/dev/full 2>err; got=$?; set -e
    if [ "$got" -ne 1 ] || [ "$(wc -l <err)" -ne 1 ] ||
       ! grep -q 'cannot write the help' err; then
      echo "FAIL: $ex --help >/dev/full exited $got"; cat err; exit 1
    fi
  done
fi
echo "ok: every bad argument said in one line, with its exit status"
