# Shared by the agent's tests (sourced): run the research-and-approve agent
# in a case directory and check a finished run's invariants.
#   demo plugin check agent_dir   set by the sourcing script
#   wrap                          optional: a command to run them under
#   db                            optional: the store's name in DIR
#                                 (default s.db)
#   model                         optional: the model URL (default: DIR's
#                                 copy of the scripted model's script)

expected_answer='Maintaining the fleet for the next three years costs 153000 EUR: 12 vans at 4250 EUR per van per year (rates.json, 2026), times 3 years.'

# new_case DIR: a fresh store and a fresh copy of the script (its served
# count starts at 0).
new_case() {
  mkdir -p "$1"
  cp "$agent_dir/script.json" "$1/script.json"
}

# run_demo DIR ARGS...: agent-demo on DIR's store; output in DIR/out, exit
# status in DIR/rc.
run_demo() {
  d=$1; shift
  demo_rc=0
  AGENT_ALLOW= ${wrap:-} "$demo" --store "$d/${db:-s.db}" --model "${model:-scripted://$d/script.json}" \
    --data "$agent_dir/data" --plugin "$plugin" "$@" >"$d/out" 2>&1 || demo_rc=$?
  echo "$demo_rc" >"$d/rc"
  cat "$d/out" >>"$d/log"
  sed -n 's/^resume token: //p' "$d/out" | tail -1 >"$d/tok.new"
  if [ -s "$d/tok.new" ]; then mv "$d/tok.new" "$d/tok"; else rm -f "$d/tok.new"; fi
}

# crashed DIR: did the last run_demo kill itself?
crashed() { grep -q '^\*\*\* SIGKILL' "$1/out"; }

# answer DIR ARGS...: resume with the approval (with the token last seen,
# if any; else the run's own).
answer() {
  d=$1; shift
  if [ -s "$d/tok" ]; then
    run_demo "$d" --answer '{"approved": true}' --token "$(cat "$d/tok")" "$@"
  else
    run_demo "$d" --answer '{"approved": true}' "$@"
  fi
}

# finish DIR: continue the run until it completes, approving it when asked.
finish() {
  for _ in 1 2 3 4; do
    run_demo "$1"
    if grep -q '^run research-1: completed' "$1/out"; then return 0; fi
    if grep -q '^run research-1: suspended' "$1/out"; then
      answer "$1"
      if grep -q '^run research-1: completed' "$1/out"; then return 0; fi
    fi
  done
  echo "FAIL: run in $1 did not complete:"; cat "$1/log"; exit 1
}

# served DIR: requests the scripted model served.
served() { if [ -f "$1/script.json.served" ]; then wc -l <"$1/script.json.served" | tr -d ' '; else echo 0; fi; }

# expect DIR KEY VALUE: agent-check's line KEY is VALUE.
expect() {
  got=$(sed -n "s/^$2 //p" "$1/check")
  if [ "$got" != "$3" ]; then
    echo "FAIL ($1): $2 is '$got', expected '$3'"; cat "$1/check"; cat "$1/log"; exit 1
  fi
}

# check_ledger DIR: the run completed with the approved answer, its ledger
# verifies, 4 model exchanges are recorded, and each tool ran once with a
# good result.
check_ledger() {
  AGENT_MODEL="scripted://$1/script.json" AGENT_DATA="$agent_dir/data" \
    ${wrap:-} "$check" "$1/${db:-s.db}" "$plugin" research-1 >"$1/check"
  expect "$1" status completed
  expect "$1" verify ok
  expect "$1" exchanges 4
  for t in calculator read_file http_get search_notes; do
    expect "$1" "calls $t" 1
    expect "$1" "results $t" 1
  done
  expect "$1" "calls ask_human" 0
  expect "$1" tool_errors 0
  expect "$1" other_calls 0
  expect "$1" suspends 1
  expect "$1" resumes 1
  expect "$1" answer "$expected_answer"
}

# check_run DIR [REPAID]: check_ledger, and the scripted model served 4
# requests (+ REPAID: a model call cut off by a kill before its record).
check_run() {
  check_ledger "$1"
  want=$((4 + ${2:-0}))
  if [ "$(served "$1")" -ne "$want" ]; then
    echo "FAIL ($1): the model served $(served "$1") requests, expected $want"; cat "$1/log"; exit 1
  fi
}

# repaid DIR: 1 when the kill struck between a model call and its record
# (the exchange step appended, not yet durable), else 0.
repaid() {
  if grep -q '^\*\*\* SIGKILL at step boundary [0-9]* (step_appended side_effect by researcher' "$1/log"; then echo 1; else echo 0; fi
}

# finish_replay DIR: as finish, with ledger-replay (replay set by the
# sourcing script): continue the run, resume it with the approval.
finish_replay() {
  for _ in 1 2 3 4; do
    for mode in run resume; do
      if [ $mode = run ]; then set -- "$1" --run research-1
      else set -- "$1" --resume research-1 --answer '{"approved": true}'; fi
      rc=0
      AGENT_MODEL="${model:-scripted://$1/script.json}" AGENT_DATA="$agent_dir/data" \
        AGENT_ALLOW= "$replay" "$1/${db:-s.db}" --plugin "$plugin" "$2" "$3" ${4:+"$4"} ${5:+"$5"} \
        >"$1/out" 2>&1 || rc=$?
      cat "$1/out" >>"$1/log"
      [ "$rc" -eq 0 ] && return 0
      set -- "$1"
    done
  done
  echo "FAIL: ledger-replay did not complete the run in $1:"; cat "$1/log"; exit 1
}
