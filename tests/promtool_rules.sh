#!/bin/sh
# The alert rules parse and their unit tests pass (promtool test rules).
set -e
if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool is missing: run scripts/bootstrap (package prometheus)"
  exit 1
fi
cd "$1"
promtool check rules rasd-alerts.yml
promtool test rules rasd-alerts_test.yml
