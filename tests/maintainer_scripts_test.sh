#!/bin/bash
# The package's maintainer scripts on install, upgrade, remove and purge,
# run against stubs of deb-systemd-helper, deb-systemd-invoke and the
# systemd tools that record their calls: what each step enables, starts,
# restarts, stops and masks.
set -euo pipefail
scripts=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stubs="$work/stubs"
mkdir "$stubs"
for tool in deb-systemd-helper deb-systemd-invoke systemctl systemd-sysusers systemd-tmpfiles \
    addgroup; do
  cat >"$stubs/$tool" <<STUB
#!/bin/sh
echo "$tool \$*" >>"$work/calls"
# was-enabled answers as the test says (a first install: true).
if [ "$tool" = deb-systemd-helper ] && [ "\$1" = --quiet ] && [ "\$2" = was-enabled ]; then
  exit "\${STUB_WAS_ENABLED:-0}"
fi
exit 0
STUB
  chmod +x "$stubs/$tool"
done
fail() { echo "FAIL: $*"; echo "calls:"; cat "$work/calls" 2>/dev/null || true; exit 1; }

# run SCRIPT ARGS...: the calls it made, one per line.
run() {
  : >"$work/calls"
  PATH="$stubs:/usr/bin:/bin" sh -e "$scripts/$1" "${@:2}" || fail "$1 $* exited $?"
  grep -v -e '^systemctl --system daemon-reload' -e '^systemd-' -e '^addgroup' "$work/calls" || true
}
expect() {  # expect NAME ACTUAL EXPECTED
  [ "$2" = "$3" ] || { echo "FAIL: $1"; echo "--- got"; echo "$2"; echo "--- expected"; echo "$3"; exit 1; }
  echo "ok: $1"
}

for script in postinst prerm postrm; do
  sh -n "$scripts/$script" || fail "$script: syntax"
done

expect "a first install enables the units and starts them" "$(run postinst configure)" \
"deb-systemd-helper unmask rasd.socket
deb-systemd-helper --quiet was-enabled rasd.socket
deb-systemd-helper enable rasd.socket
deb-systemd-helper unmask rasd.service
deb-systemd-helper --quiet was-enabled rasd.service
deb-systemd-helper enable rasd.service
deb-systemd-invoke start rasd.socket rasd.service"

grep -q "^systemd-sysusers /usr/lib/sysusers.d/rasd.conf" "$work/calls" ||
  fail "a first install creates no rasd group"
grep -q "^systemd-tmpfiles --create /usr/lib/tmpfiles.d/rasd.conf" "$work/calls" ||
  fail "a first install creates no directories"

expect "an upgrade restarts a running rasd and starts nothing else" \
  "$(run postinst configure 0.1.0)" \
"deb-systemd-helper unmask rasd.socket
deb-systemd-helper --quiet was-enabled rasd.socket
deb-systemd-helper enable rasd.socket
deb-systemd-helper unmask rasd.service
deb-systemd-helper --quiet was-enabled rasd.service
deb-systemd-helper enable rasd.service
deb-systemd-invoke try-restart rasd.service"

expect "an upgrade leaves units the operator disabled disabled" \
  "$(STUB_WAS_ENABLED=1 run postinst configure 0.1.0)" \
"deb-systemd-helper unmask rasd.socket
deb-systemd-helper --quiet was-enabled rasd.socket
deb-systemd-helper update-state rasd.socket
deb-systemd-helper unmask rasd.service
deb-systemd-helper --quiet was-enabled rasd.service
deb-systemd-helper update-state rasd.service
deb-systemd-invoke try-restart rasd.service"

expect "prerm on upgrade stops nothing" "$(run prerm upgrade 0.2.0)" ""
expect "prerm on remove stops rasd" "$(run prerm remove)" \
  "deb-systemd-invoke stop rasd.service rasd.socket"
expect "postrm on remove masks the units" "$(run postrm remove)" \
  "deb-systemd-helper mask rasd.socket rasd.service"
expect "postrm on upgrade touches nothing" "$(run postrm upgrade 0.2.0)" ""
if [ -e /var/lib/rasd ]; then
  echo "skipped: purge (it deletes /var/lib/rasd, which exists on this machine)"
else
  expect "purge forgets the units" "$(run postrm purge)" \
"deb-systemd-helper purge rasd.socket rasd.service
deb-systemd-helper unmask rasd.socket rasd.service"
fi
echo "maintainer scripts ok"
