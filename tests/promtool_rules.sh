#!/bin/sh
# The alert rules parse and their unit tests pass (promtool test rules).
# Exit 77 (skipped) where promtool is not installed.
set -e
if ! command -v promtool >/dev/null 2>&1; then
  echo "skipped: promtool is not installed (scripts/bootstrap installs the prometheus package)"
  exit 77
fi
cd "$1"
promtool check rules rasd-alerts.yml
promtool test rules rasd-alerts_test.yml
