#!/bin/bash
# The Debian package: built with CPack from the build tree, it lists what it
# should, declares its conffile and library dependencies, its binaries run
# from an unpacked tree, its units pass systemd-analyze verify, and lintian
# finds no errors. Every tool comes from scripts/bootstrap: a missing one fails.
set -euo pipefail
build=$1
for tool in dpkg-deb cpack lintian systemd-analyze; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: run scripts/bootstrap"; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || {
  cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/out/rasd_*.deb)
fail() { echo "FAIL: $*"; exit 1; }

contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for path in ./usr/bin/rasd ./usr/bin/rasctl ./etc/rasd/rasd.yaml \
    ./usr/lib/systemd/system/rasd.service ./usr/lib/systemd/system/rasd.socket \
    ./usr/lib/sysusers.d/rasd.conf ./usr/lib/tmpfiles.d/rasd.conf \
    ./usr/share/rasd/prometheus/rasd-alerts.yml ./usr/share/rasd/grafana/rasd-dashboard.json \
    ./usr/share/man/man8/rasd.8.gz ./usr/share/man/man8/rasctl.8.gz \
    ./usr/share/bash-completion/completions/rasctl ./usr/share/doc/rasd/copyright \
    ./usr/share/rasd/node-problem-detector/rasd-plugin.json ./usr/lib/rasd/rasd-healthcheck; do
  grep -qx "$path" <<<"$contents" || fail "$path is not in the package"
done
dpkg-deb -e "$deb" "$work/control"
grep -qx /etc/rasd/rasd.yaml "$work/control/conffiles" || fail "rasd.yaml is not a conffile"
depends=$(dpkg-deb -f "$deb" Depends)
for library in libsqlite3-0 libsystemd0 libprometheus-cpp-pull libyaml-cpp0.7 libspdlog libgrpc++1.51; do
  grep -q "$library" <<<"$depends" || fail "Depends lacks $library: $depends"
done

root="$work/root"
dpkg-deb -x "$deb" "$root"
"$root/usr/bin/rasd" --check-config "$root/etc/rasd/rasd.yaml" | grep -q ": ok" ||
  fail "the packaged rasd does not accept the packaged config"
"$root/usr/bin/rasctl" --version | grep -q "rasctl" || fail "the packaged rasctl does not run"
grep -q "^g rasd" "$root/usr/lib/sysusers.d/rasd.conf" || fail "no rasd group in sysusers.d"

# verify needs ExecStart's binary: the unpacked one.
mkdir "$work/units"
sed "s|/usr/bin/rasd|$root/usr/bin/rasd|g" "$root/usr/lib/systemd/system/rasd.service" \
  >"$work/units/rasd.service"
cp "$root/usr/lib/systemd/system/rasd.socket" "$work/units/"
out=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no \
  "$work/units/rasd.service" "$work/units/rasd.socket" 2>&1) || fail "verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify: $out"
# The hardening goal: an exposure of 3.0 or lower (docs/security.md).
score=$(systemd-analyze security --offline=yes "$work/units/rasd.service" 2>/dev/null |
  sed -n 's/.*Overall exposure level for rasd.service: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || fail "no exposure score from systemd-analyze security"
echo "systemd-analyze security: exposure $score"
awk -v s="$score" 'BEGIN { exit !(s <= 3.0) }' || fail "exposure $score is over 3.0"
errors=$(lintian --tag-display-limit 0 "$deb" 2>&1 | grep '^E:' || true)
[ -z "$errors" ] || fail "lintian: $errors"
echo "lintian: no errors"
echo "package ok: $(basename "$deb")"
