#!/usr/bin/env bash
# A stranger who hears the group forges its members' datagrams and replays captured
# ones (`hmcast soak --spray-forged`): with the group key nothing forged is
# delivered and members count the forgeries; without a key forged messages are
# delivered and the soak fails. Both halves must hold.
set -euo pipefail
tool=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tool" keygen --out "$dir/group.key" >/dev/null
common=(soak --transport socket --procs 5 --senders 2 --messages 1500 --loss 0.02 --spray-forged --json)
"$tool" "${common[@]}" --key-file "$dir/group.key" 2>"$dir/keyed.err" | tail -n 1 >"$dir/keyed.json" ||
  { echo "FAIL: the keyed soak failed:"; cat "$dir/keyed.json"; tail -20 "$dir/keyed.err"; exit 1; }
set +e
"$tool" "${common[@]}" --timeout 10 2>"$dir/plain.err" | tail -n 1 >"$dir/plain.json"
plain_status=${PIPESTATUS[0]}
set -e
python3 - "$dir/keyed.json" "$dir/plain.json" "$plain_status" <<'PY'
import json, sys
keyed = json.load(open(sys.argv[1]))
plain = json.load(open(sys.argv[2]))
status = int(sys.argv[3])
bad = []
if not keyed["delivered_ok"] or keyed["forged_accepted"] != 0: bad.append("with the key: forged messages got in or the group failed")
if keyed["auth_failures"] == 0 or keyed["replays_refused"] == 0: bad.append("with the key: no forgery or replay was refused (the forger did not reach the group)")
if keyed["forge_data"] == 0: bad.append("the forger forged nothing")
if keyed["forge_joins_admitted"] != 0: bad.append("with the key: the manager let the stranger join")
if status == 0 or plain["delivered_ok"] or plain["forged_accepted"] == 0: bad.append("without a key: no forged message was delivered, so the test cannot tell")
for b in bad: print("FAIL:", b)
print(f'keyed: forged_accepted {keyed["forged_accepted"]}, auth_failures {keyed["auth_failures"]}, '
      f'replays_refused {keyed["replays_refused"]}, forged {keyed["forge_data"]}; '
      f'without a key: forged_accepted {plain["forged_accepted"]}, exit {status}')
sys.exit(1 if bad else 0)
PY
