#!/usr/bin/env bash
# tests/package/check_package.sh BUILD_DIR - the Debian package delayq-server
# (issue 36; docs/server.md, "The Debian package"; label `package`):
#
#   1. scripts/package.sh packs BUILD_DIR (the tree the tests ran on) twice,
#      as revisions 1 and 2;
#   2. dpkg-deb: the files are exactly the ones docs/server.md lists, the
#      Depends are dpkg-shlibdeps' (libc6, libstdc++6, hiredis, sqlite),
#      /etc/delayq/delayq.conf is a conffile; lintian finds no error;
#   3. the unit passes `systemd-analyze verify`, and `systemd-analyze
#      security --offline=yes` scores it under 3.0 (the figure is printed);
#      its TimeoutStopSec is above the packaged drain_timeout;
#   4. the packaged config file is one the packaged server accepts;
#   5. dpkg installs it into an empty directory tree (--root, maintainer
#      scripts run with DPKG_ROOT), upgrades it to revision 2 keeping the
#      operator's edit of the conffile, removes it (conffile kept, unit
#      masked) and purges it: nothing the package made stays but the data
#      directory and the system user, and the purge says so.
#
# Needs dpkg-dev, lintian, help2man and systemd (for systemd-analyze and
# systemd-sysusers); scripts/test.sh installs them (scripts/common.sh).
set -euo pipefail

build="$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)"
root_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/delayq-package.XXXXXX")"
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
for tool in dpkg-deb dpkg lintian systemd-analyze systemd-sysusers help2man deb-systemd-helper; do
  command -v "$tool" >/dev/null ||
    { echo "check_package: $tool not found: bash scripts/test.sh installs it (scripts/common.sh)" >&2; exit 1; }
done

# ---------------------------------------------------------------- 1. pack
deb1="$(bash "$root_dir/scripts/package.sh" --build "$build" --no-build --out "$work/r1" | tail -n 1)"
deb2="$(bash "$root_dir/scripts/package.sh" --build "$build" --no-build --revision 2 --out "$work/r2" | tail -n 1)"
echo "packed: $deb1 and $deb2"

# ---------------------------------------------------------------- 2. contents
want_files="./etc/delayq/delayq.conf
./lib/systemd/system/delayq-server.service
./usr/bin/delayq-server
./usr/bin/delayqctl
./usr/lib/sysusers.d/delayq-server.conf
./usr/share/doc/delayq-server/changelog.Debian.gz
./usr/share/doc/delayq-server/copyright
./usr/share/doc/delayq-server/openapi.json
./usr/share/man/man1/delayq-server.1.gz
./usr/share/man/man1/delayqctl.1.gz"
got_files="$(dpkg-deb --contents "$deb1" | awk '$1 !~ /^d/ {print $6}' | LC_ALL=C sort)"
[[ "$got_files" == "$want_files" ]] || fail "the package's files differ:
$(diff <(echo "$want_files") <(echo "$got_files") || true)"
[[ "$(dpkg-deb -f "$deb1" Version)" == "0.1.0-1" ]] || fail "revision 1 is version $(dpkg-deb -f "$deb1" Version)"
[[ "$(dpkg-deb -f "$deb2" Version)" == "0.1.0-2" ]] || fail "revision 2 is version $(dpkg-deb -f "$deb2" Version)"
depends="$(dpkg-deb -f "$deb1" Depends)"
for lib in libc6 libstdc++6 libhiredis0.14 libsqlite3-0; do
  [[ ", $depends," == *", $lib ("* ]] || fail "Depends lacks $lib: $depends"
done
conffiles="$(dpkg-deb --ctrl-tarfile "$deb1" | tar -xOf - ./conffiles)"
[[ "$conffiles" == "/etc/delayq/delayq.conf" ]] || fail "conffiles: $conffiles"
# Errors fail; warnings and the rest are shown.
lintian_rc=0
lintian --fail-on error --suppress-tags initial-upload-closes-no-bugs "$deb1" >"$work/lintian.txt" 2>&1 ||
  lintian_rc=$?
grep -v 'running with root privileges' "$work/lintian.txt" || true
((lintian_rc == 0)) || fail "lintian found errors (exit $lintian_rc)"

# ---------------------------------------------------------------- 3. the unit
x="$work/x"
dpkg-deb -x "$deb1" "$x"
unit="$x/lib/systemd/system/delayq-server.service"
# verify looks for ExecStart's program on this machine: point it at the
# package's.
sed "s#^ExecStart=/usr/bin/delayq-server#ExecStart=$x/usr/bin/delayq-server#" "$unit" \
  >"$work/delayq-server.service"
if ! (cd "$work" && systemd-analyze verify --man=no ./delayq-server.service); then
  fail "systemd-analyze verify refused the unit"
fi
score="$(systemd-analyze security --offline=yes "$unit" 2>&1 |
  sed -n 's/.*Overall exposure level for delayq-server.service: \([0-9.]*\).*/\1/p')"
echo "systemd-analyze security --offline=yes: exposure $score"
[[ -n "$score" ]] || fail "systemd-analyze security gave no score"
[[ -n "$score" ]] && awk -v s="$score" 'BEGIN { exit !(s < 3.0) }' ||
  fail "the unit's exposure $score is not under 3.0"

# ---------------------------------------------------------------- 4. the config
printed="$("$x/usr/bin/delayq-server" --config "$x/etc/delayq/delayq.conf" --print-config)" ||
  fail "the packaged server refuses the packaged delayq.conf"
drain="$(sed -n 's/^drain_timeout = \([0-9]*\)s .*/\1/p' <<<"$printed")"
stop="$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s$/\1/p' "$unit")"
[[ -n "$drain" && -n "$stop" && "$stop" -gt "$drain" ]] ||
  fail "TimeoutStopSec (${stop:-?}s) is not above drain_timeout (${drain:-?}s)"
grep -q '^store = sqlite:/var/lib/delayq/tasks.db ' <<<"$printed" ||
  fail "the packaged store is not sqlite:/var/lib/delayq/tasks.db"
grep -q '^StateDirectory=delayq$' "$unit" || fail "the unit has no StateDirectory=delayq"

# ---------------------------------------------------------------- 5. dpkg --root
r="$work/root"
mkdir -p "$r/var/lib/dpkg/info" "$r/var/lib/dpkg/updates" "$r/etc"
touch "$r/var/lib/dpkg/status" "$r/var/lib/dpkg/available"
# Maintainer scripts run here (not chrooted) with DPKG_ROOT=$r; the tree has
# none of the dependencies.
dpkg_r() { dpkg --root="$r" --force-script-chrootless --force-depends --force-confold "$@"; }
# What is in the tree (files and links), but dpkg's own database.
tree() { (cd "$r" && find . \( -type f -o -type l \) ! -path './var/lib/dpkg/*' | LC_ALL=C sort); }

# This machine's own units and users, to see that nothing reached them.
host_state() { ls -la /etc/systemd/system /etc/systemd/system/multi-user.target.wants 2>/dev/null; cat /etc/passwd; }
host_before="$(host_state)"

dpkg_r -i "$deb1" >"$work/dpkg1.log" 2>&1 || fail "dpkg -i revision 1: $(cat "$work/dpkg1.log")"
[[ "$(dpkg-query --admindir="$r/var/lib/dpkg" -W -f='${Status} ${Version}' delayq-server)" == "install ok installed 0.1.0-1" ]] ||
  fail "after dpkg -i: $(dpkg-query --admindir="$r/var/lib/dpkg" -W delayq-server 2>&1)"
[[ -x "$r/usr/bin/delayq-server" && -f "$r/etc/delayq/delayq.conf" ]] || fail "dpkg -i left no binary or config"
[[ -L "$r/etc/systemd/system/multi-user.target.wants/delayq-server.service" ]] ||
  fail "postinst did not enable the unit"
grep -q '^delayq:' "$r/etc/passwd" 2>/dev/null || fail "postinst made no user delayq"

# The operator edits the conffile and adds a token; the service ran and
# left tasks.
echo "tick = 5" >>"$r/etc/delayq/delayq.conf"
install -m 640 /dev/null "$r/etc/delayq/token"
mkdir -p "$r/var/lib/delayq" && echo data >"$r/var/lib/delayq/tasks.db"

dpkg_r -i "$deb2" >"$work/dpkg2.log" 2>&1 || fail "dpkg -i revision 2 (upgrade): $(cat "$work/dpkg2.log")"
[[ "$(dpkg-query --admindir="$r/var/lib/dpkg" -W -f='${Version}' delayq-server)" == "0.1.0-2" ]] ||
  fail "the upgrade did not install revision 2"
grep -q '^tick = 5$' "$r/etc/delayq/delayq.conf" || fail "the upgrade lost the operator's edit of delayq.conf"

dpkg_r -r delayq-server >"$work/dpkg3.log" 2>&1 || fail "dpkg -r: $(cat "$work/dpkg3.log")"
[[ ! -e "$r/usr/bin/delayq-server" && ! -e "$r/lib/systemd/system/delayq-server.service" ]] ||
  fail "dpkg -r left the programs or the unit"
[[ -f "$r/etc/delayq/delayq.conf" ]] || fail "dpkg -r removed the conffile (only a purge should)"
[[ "$(readlink "$r/etc/systemd/system/delayq-server.service" || true)" == /dev/null ]] ||
  fail "dpkg -r did not mask the unit"

dpkg_r -P delayq-server >"$work/dpkg4.log" 2>&1 || fail "dpkg -P: $(cat "$work/dpkg4.log")"
grep -q 'delayq-server: purged. Kept: the tasks in /var/lib/delayq' "$work/dpkg4.log" ||
  fail "the purge did not say what it kept: $(cat "$work/dpkg4.log")"
left="$(tree)"
# What may stay: the data, and the user (the files systemd-sysusers wrote,
# its lock file among them).
allowed="./etc/.pwd.lock
./etc/group
./etc/gshadow
./etc/passwd
./etc/shadow
./var/lib/delayq/tasks.db"
[[ "$left" == "$(LC_ALL=C sort <<<"$allowed")" ]] || fail "after the purge, files other than the data and the user's stayed:
$(diff <(LC_ALL=C sort <<<"$allowed") <(echo "$left") || true)"
[[ ! -e "$r/etc/delayq" ]] || fail "the purge left /etc/delayq"
[[ -z "$(dpkg-query --admindir="$r/var/lib/dpkg" -W -f='${Status}' delayq-server 2>/dev/null | grep -v 'not-installed')" ]] ||
  fail "dpkg still knows delayq-server after the purge"
[[ "$(host_state)" == "$host_before" ]] || fail "the maintainer scripts changed this machine's units or users"

if ((failures)); then
  echo "check_package: $failures failures" >&2
  exit 1
fi
echo "check_package: built, checked (dpkg-deb, lintian: no error; exposure $score), installed, upgraded, removed and purged in a directory tree"
