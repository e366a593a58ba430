#!/usr/bin/env bash
# `hmcast keygen`: a 64-hex-digit key in a new file of mode 600; an existing file is kept.
set -euo pipefail
tool=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tool" keygen --out "$dir/k1" >/dev/null
"$tool" keygen --out "$dir/k2" >/dev/null
[ "$(stat -c %a "$dir/k1")" = 600 ] || { echo "FAIL: key file mode $(stat -c %a "$dir/k1"), not 600"; exit 1; }
grep -qxE '[0-9a-f]{64}' "$dir/k1" || { echo "FAIL: the key file is not 64 hex digits"; exit 1; }
cmp -s "$dir/k1" "$dir/k2" && { echo "FAIL: two keys are the same"; exit 1; }
before=$(cat "$dir/k1")
if "$tool" keygen --out "$dir/k1" 2>"$dir/err"; then echo "FAIL: keygen overwrote a key file"; exit 1; fi
grep -q "must not exist" "$dir/err" || { echo "FAIL: no reason given: $(cat "$dir/err")"; exit 1; }
[ "$(cat "$dir/k1")" = "$before" ] || { echo "FAIL: the existing key changed"; exit 1; }
echo "keygen: two distinct keys, mode 600, an existing file kept"
