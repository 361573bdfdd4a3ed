#!/usr/bin/env bash
# Soak: 1,000 concurrent runs of 100 calls on a pl_pool (tests/soak.c),
# round after round for SECONDS (default 300), the process SIGKILLed at a
# random instant every 1 to 4 seconds and restarted.  Then a last clean
# restart, built with AddressSanitizer (LeakSanitizer at its exit), finishes
# the runs begun and works one more whole round (so LeakSanitizer sees runs
# started, called, committed and completed, not only a replay); then the
# check: every run completed and verifies, every
# call made its effect, none that finished made it twice; and memory flat
# across restarts: each killed process's peak RSS (VmHWM, which counts the
# store's mapped pages too, so grows with the store) and its anonymous
# memory (RssAnon: heap and task stacks) are printed, and the anonymous
# memory of the last quarter of restarts must stay within 1.5 times that
# of the first quarter (plus 16 MiB).
#   scripts/soak.sh [SECONDS]      PL_SEED=n repeats a sequence of kills
# Builds build/ and build-asan/ (their pl-soak only); not part of the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
# checked before anything is built: "5m" would end in bash's arithmetic
if [ $# -gt 1 ] || ! [[ $secs =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/soak.sh [SECONDS]" >&2
  exit 2
fi
for d in build:OFF build-asan:ON; do
  cmake -S . -B "${d%%:*}" -DPL_BUILD_TESTS=ON -DPL_SANITIZE="${d##*:}" >/dev/null
  cmake --build "${d%%:*}" -j"$(nproc)" --target pl-soak >/dev/null
done

work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT
store=$work/store.db effects=$work/effects
seed=${PL_SEED:-$$}
RANDOM=$seed
echo "soak: ${secs}s, seed $seed (PL_SEED=$seed repeats the kill delays)"

start=$(date +%s)
deadline=$((start + secs))
gen=0 kills=0 anons=()
while [ "$(date +%s)" -lt "$deadline" ]; do
  build/tests/pl-soak run "$store" "$effects" "$gen" "$deadline" &
  pid=$!
  ms=$((1000 + RANDOM % 3000))
  sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
  if kill -0 "$pid" 2>/dev/null; then
    peak=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    anon=$(awk '/^RssAnon/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    kills=$((kills + 1))
    [ -n "$anon" ] && anons+=("$anon")
    echo "soak: restart $gen killed after ${ms} ms, peak RSS ${peak:-?} KiB, anonymous ${anon:-?} KiB"
  else
    if ! wait "$pid"; then
      echo "soak: restart $gen failed" >&2
      exit 1
    fi
  fi
  pid=
  gen=$((gen + 1))
done

echo "soak: last restart ($gen), under AddressSanitizer, finishes the runs begun and works a round"
ASAN_OPTIONS=detect_leaks=1 build-asan/tests/pl-soak run "$store" "$effects" \
  "$gen" -1
build/tests/pl-soak check "$store" "$effects"

# memory flat: the anonymous memory of the last quarter of the restarts
# against the first quarter's (means)
n=${#anons[@]}
if [ "$n" -ge 4 ]; then
  q=$((n / 4)) first=0 last=0
  for ((i = 0; i < q; i++)); do
    first=$((first + anons[i])) last=$((last + anons[n - 1 - i]))
  done
  first=$((first / q)) last=$((last / q))
  echo "soak: anonymous memory, first quarter of restarts ${first} KiB, last quarter ${last} KiB"
  if [ "$last" -gt $((first * 3 / 2 + 16384)) ]; then
    echo "soak: memory grew across restarts" >&2
    exit 1
  fi
fi
echo "soak: $(( $(date +%s) - start ))s, $kills kills, $gen restarts: passed"
