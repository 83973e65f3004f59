#!/usr/bin/env bash
# The suite's leak check itself: it fails naming a process that carries its
# marker, and passes once that process is gone.
# Usage: no_process_left_test.sh CHECKER
set -u
checker=$1
id="leak-check-selftest-$$"
RASD_TEST_TREE=$id sleep 60 &
leaked=$!
out=$("$checker" "$id" 0.2)
rc=$?
kill "$leaked"
wait "$leaked" 2>/dev/null
if [[ $rc -ne 1 ]]; then
  echo "FAIL: exit $rc with pid $leaked running: $out"
  exit 1
fi
if [[ $out != *"pid $leaked "* ]]; then
  echo "FAIL: pid $leaked not named: $out"
  exit 1
fi
if ! out=$("$checker" "$id" 0.2); then
  echo "FAIL: it failed with nothing left: $out"
  exit 1
fi
echo "leak check ok"
