#!/bin/bash
# `make run` is the first thing a new user sees: the demo must pass, and
# each step must show what rasd did (not only the final table).
set -uo pipefail
demo=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$demo" >"$out" 2>&1
rc=$?
cat "$out"
fail=0
need() {  # need WHAT REGEX
  if ! grep -qE -- "$2" "$out"; then
    echo "FAIL: the demo's output does not show $1 (/$2/)"
    fail=1
  fi
}
need "step 1 retiring the page" '^    -> retire-page \(ok\)'
need "step 2 stopping exactly llm, and where" \
  "^    -> kill-consumer: job llm stopped: its [0-9]+ stream\(s\) on device\(s\) [0-9,]+ aborted; no other job's"
need "step 2 leaving the collective alone" '^    -> allreduce, on the same devices, kept its steps'
need "step 2b containing the KV fault in chat" \
  '^    -> kill-consumer: job chat contained it: the page of 0x[0-9a-f]+ on device 3 is out of its use; no stream aborted'
need "step 2b costing sequences, not the job" \
  '^    -> chat: [1-9][0-9]* KV block\(s\) retired, [0-9]+ sequence\(s\) recomputed from their tokens, [0-9]+ running on; state serving, 0 lost'
need "step 3 draining device 2" '^    -> drain-device \(ok\)'
need "step 3 isolating device 2" '^    -> isolate-device \(ok\)'
need "step 3 re-forming the collective" '^    -> collective re-formed on \[0,1,3\]'
need "step 3 moving llm with none lost" '^    -> llm now serves on \[0,1,3\]: [0-9]+ request\(s\) moved off device 2, 0 lost'
need "step 4 the self-test" '^    -> self-test passed'
need "step 4 device 2 working again" '^    -> device 2 works again: allreduce re-formed on \[0,1,2,3\], llm serves on \[0,1,2,3\]'
need "step 5 isolating the silently corrupting device" \
  '^    -> isolate-device: silent data corruption: add n=[0-9]+'
need "step 5 redoing the collective's steps" \
  '^    -> allreduce rolled back and re-formed on \[0,2,3\]: [0-9]+ step\(s\) computed again, checksums ok'
need "the verdict" '^demo passed'
need "what to try next" '^Next: `make daemon`'
[[ $rc == 0 ]] || { echo "FAIL: rasd-demo exited $rc"; fail=1; }
[[ $fail == 0 ]] && echo "demo output ok"
exit $fail
