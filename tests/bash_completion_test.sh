#!/bin/bash
# The packaged bash completion, sourced into a real bash and driven as the
# shell drives it (COMP_WORDS, COMP_CWORD), against the built rasctl.
set -euo pipefail
rasctl=$1
script=$2
source "$script"
fail=0
# complete LINE...: what <TAB> offers after the words (the last is the one
# being completed, possibly empty).
complete_words() {
  COMP_WORDS=("$rasctl" "$@")
  COMP_CWORD=$#
  _rasctl
  printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}
expect() {  # expect WHAT EXPECTED WORDS...
  local what=$1 expected=$2
  shift 2
  local got
  got=$(complete_words "$@")
  if [[ "$got" != "$expected" ]]; then
    echo "FAIL: $what: rasctl $* <TAB>"
    echo "  got:      $got"
    echo "  expected: $expected"
    fail=1
  else
    echo "ok: $what"
  fi
}
expect "commands by prefix" "devices drain" "d"
expect "global options before the command" "--json" "--js"
expect "a command after a global option" "events" "--json" "eve"
expect "a command's options after a global option" "--follow" "--json" "events" "--f"
expect "a command's options when nothing else fits" "--input --seed" "infer" "svc" ""
expect "global options after the command" "--socket" "status" "--so"
expect "severity values" "SRAO SRAR" "events" "--severity" "SR"
expect "job start's kinds" "collective inference llm" "job" "start" ""
expect "job start's options" "--checkpoint-every" "job" "start" "collective" "c1" "--che"
expect "infer's options" "--input" "infer" "svc" "--in"
expect "inject kinds" "hang hwpoison" "inject" "h"
expect "inject's options after its kind" "--mc" "inject" "edac" "--m"
expect "an option given once is not offered again" "" "events" "--limit" "5" "--lim"
expect "a typo offers nothing" "" "statsu" "--zzz"
# Files where a file goes.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
touch "$dir/dmesg-one.txt" "$dir/dmesg-two.txt"
expect "scan completes file names" "$dir/dmesg-one.txt $dir/dmesg-two.txt" "scan" "$dir/dmesg-"
expect "--socket completes file names" "$dir/dmesg-one.txt $dir/dmesg-two.txt" "--socket" "$dir/dm"
# After `--` the words are the command's: files, never rasctl's options.
expect "run's command after --" "$dir/dmesg-one.txt $dir/dmesg-two.txt" "run" "--" "$dir/dm"
expect "the command's own options after --" "" "run" "--" "sh" "--"
[[ $fail == 0 ]] && echo "bash completion ok"
exit $fail
