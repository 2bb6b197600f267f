#!/usr/bin/env bash
# Every variable src/config.c reads (each "CONTPROF_...", "DD_...",
# "PYROSCOPE_..." name in it) is in docs/configuration.md, as `NAME` (its
# row, or the row of the setting it falls back to): the table users read
# must not miss one.
set -euo pipefail
root=${1:?usage: check_documented.sh SOURCE_DIR}
missing=0
vars=$(grep -o '"\(CONTPROF\|DD\|PYROSCOPE\)_[A-Z0-9_]*"' "$root/src/config.c" |
  tr -d '"' | sort -u)
[[ -n $vars ]] || { echo "no variable names found in src/config.c" >&2; exit 1; }
for v in $vars; do
  if ! grep -q "\`$v\`" "$root/docs/configuration.md"; then
    echo "docs/configuration.md does not name $v" >&2
    missing=1
  fi
done
echo "$(wc -w <<<"$vars") variables, each in docs/configuration.md"
exit $missing
