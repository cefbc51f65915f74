#!/bin/sh
# deadcode.sh reports functions that no program of the module reaches, tests
# not counted: code only tests use is reported too. It leaves out the test
# harness packages (internal/importrules/harnesses.txt: they exist for tests)
# and the findings below, each kept for a reason. Prints nothing and exits 0
# when clean; else prints the findings and exits 1.
#
# Kept:
#   internal/rhmap Map.Slots, Map.Occupied, Map.Check: the table's invariant
#   check and slot walk, called by rhmap's tests and by index's tests of the
#   tables index builds on it (another package: not a _test.go helper).
set -eu
cd "$(dirname "$0")/.."
skip=$(grep -v '^#' internal/importrules/harnesses.txt | sed 's|.*|^&/|' | paste -sd'|' -)
keep='^internal/rhmap/rhmap\.go:[0-9:]+ unreachable func: Map\.(Slots|Occupied|Check)$'
all=$(.cache/bin/deadcode "${@:-./...}")
out=$(printf '%s\n' "$all" | grep -Ev "$skip" | grep -Ev "$keep" || true)
if [ -n "$out" ]; then
	echo "$out"
	exit 1
fi
