#!/usr/bin/env bash
# The test step of `make test`: race-enabled tests of every package, in
# random order, with a line per package as soon as it finishes.
#
# `go test ./...` prints its results in the order of the package list, so
# one slow package early in the list kept the whole run silent for minutes.
# Here the test binaries are compiled first (`go test -c`, one go command,
# so every dependency is built once), then run NPROC at a time; each prints
# "ok"/"FAIL", the package and its time when it ends, a failure with its
# whole output. The exit status is 1 when any package failed.
#
# Environment: GO (go), PKGS (./...), TEST_TIMEOUT (14m), NPROC (nproc).
set -euo pipefail

GO=${GO:-go}
PKGS=${PKGS:-./...}
TEST_TIMEOUT=${TEST_TIMEOUT:-14m}
NPROC=${NPROC:-$(nproc)}

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

start=$(date +%s)
echo "== compiling the race-enabled test binaries of $PKGS"
# shellcheck disable=SC2086
$GO test -race -c -o "$bin/" $PKGS
echo "== compiled in $(($(date +%s) - start)) s; running $NPROC packages at a time"

# One line per package that has a test binary: <dir> <import path> <binary>.
# shellcheck disable=SC2086
$GO list -f '{{.Dir}} {{.ImportPath}} {{.Name}}' $PKGS | while read -r dir path name; do
	b="$bin/$name.test"
	if [ "$name" = main ]; then
		b="$bin/$(basename "$path").test"
	fi
	[ -x "$b" ] && echo "$dir $path $b"
done >"$bin/list"

run_one() {
	local dir=$1 path=$2 b=$3 out t0 rc
	out=$(mktemp)
	t0=$(date +%s.%N)
	rc=0
	(cd "$dir" && "$b" -test.shuffle=on -test.timeout="$TEST_TIMEOUT" -test.paniconexit0) >"$out" 2>&1 || rc=$?
	local secs
	secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	if [ "$rc" -eq 0 ]; then
		printf 'ok   %-45s %6ss\n' "$path" "$secs"
	else
		printf 'FAIL %-45s %6ss (exit %d)\n' "$path" "$secs" "$rc"
		sed 's/^/    /' "$out"
		touch "$FAILED_MARK"
	fi
	rm -f "$out"
}
export -f run_one
export TEST_TIMEOUT
export FAILED_MARK="$bin/failed"

xargs -P "$NPROC" -L 1 bash -c 'run_one "$@"' _ <"$bin/list"

echo "== tests took $(($(date +%s) - start)) s"
if [ -e "$FAILED_MARK" ]; then
	echo "== FAIL: see the packages marked FAIL above"
	exit 1
fi
