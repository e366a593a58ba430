#!/usr/bin/env bash
# `hmcast keygen`: a 64-hex-digit key and its cipher in a new file of mode 600; an existing
# file is kept; --cipher picks the cipher and refuses one it does not know.
set -euo pipefail
tool=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tool" keygen --out "$dir/k1" >/dev/null
"$tool" keygen --out "$dir/k2" >/dev/null
[ "$(stat -c %a "$dir/k1")" = 600 ] || { echo "FAIL: key file mode $(stat -c %a "$dir/k1"), not 600"; exit 1; }
grep -qxE '[0-9a-f]{64} (aes256gcm|chacha20poly1305)' "$dir/k1" ||
  { echo "FAIL: the key file is not 64 hex digits and a cipher: $(cut -c65- "$dir/k1")"; exit 1; }
"$tool" keygen --out "$dir/k3" --cipher chacha20poly1305 >/dev/null
grep -qxE '[0-9a-f]{64} chacha20poly1305' "$dir/k3" || { echo "FAIL: --cipher chacha20poly1305 not written"; exit 1; }
if "$tool" keygen --out "$dir/k4" --cipher rot13 2>"$dir/err"; then echo "FAIL: keygen took --cipher rot13"; exit 1; fi
grep -q "aes256gcm or chacha20poly1305" "$dir/err" || { echo "FAIL: no reason given for rot13: $(cat "$dir/err")"; exit 1; }
[ ! -e "$dir/k4" ] || { echo "FAIL: a key file was written for an unknown cipher"; exit 1; }
cmp -s "$dir/k1" "$dir/k2" && { echo "FAIL: two keys are the same"; exit 1; }
before=$(cat "$dir/k1")
if "$tool" keygen --out "$dir/k1" 2>"$dir/err"; then echo "FAIL: keygen overwrote a key file"; exit 1; fi
grep -q "must not exist" "$dir/err" || { echo "FAIL: no reason given: $(cat "$dir/err")"; exit 1; }
[ "$(cat "$dir/k1")" = "$before" ] || { echo "FAIL: the existing key changed"; exit 1; }
echo "keygen: two distinct keys with their cipher ($(cut -d" " -f2 "$dir/k1") here), mode 600, an existing file kept, --cipher honoured and checked"
