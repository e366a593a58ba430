#!/usr/bin/env python3
"""Reads what the VM left in the results directory (tests/rxe/guest.sh) and prints
one JSON line: the figures of the verbs suites. Exits 0 only if the VM run
succeeded and every suite passed."""
import json
import os
import pathlib
import re
import sys

results = pathlib.Path(sys.argv[1])
vm_rc = int(sys.argv[2])
setup_s, vm_s = int(sys.argv[3]), int(sys.argv[4])


def last_json(name):
    """The last line of a suite's stdout as JSON, or None."""
    path = results / f"{name}.out"
    if not path.exists():
        return None
    lines = [l for l in path.read_text(errors="replace").splitlines() if l.strip()]
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None


devinfo = (results / "ibv_devinfo.txt").read_text(errors="replace")
device = re.search(r"hca_id:\s*(\S+)", devinfo)
mtu = re.search(r"active_mtu:\s*(\d+)", devinfo)
suites = {p.stem: int(p.read_text().strip() or -1) for p in sorted(results.glob("*.rc"))}

out = {
    "transport": "verbs",
    "device": device.group(1) if device else None,
    "active_mtu": int(mtu.group(1)) if mtu else None,
    "suites": suites,
    "vm_exit": vm_rc,
    "setup_seconds": setup_s,
    "vm_seconds": vm_s,
}
ok = vm_rc == 0 and all(rc == 0 for rc in suites.values())

soak = last_json("soak")
if soak is not None:
    for key in ("procs", "messages_sent", "delivered_ok", "duplicates_delivered", "missing",
                "ud_multicast_datagrams", "rc_bytes", "large_bytes_placed", "views_installed", "view_change_ms",
                "faults_dropped", "large_messages"):
        if key in soak:
            out[key] = soak[key]
    ok = ok and bool(soak.get("delivered_ok"))
pipe = last_json("pipeline")
if pipe is not None:
    out["pipeline"] = {k: pipe.get(k) for k in ("procs", "delivered_ok", "messages_sent", "rc_bytes",
                                                 "large_bytes_placed", "large_regions_held", "duplicates_delivered") if k in pipe}
    # Zero-copy: the blocks were RDMA WRITTEN into final buffers, and every buffer
    # registered for that was freed again once its writers confirmed they stopped.
    ok = ok and bool(pipe.get("delivered_ok")) and pipe.get("large_bytes_placed", 0) > 0 \
        and pipe.get("large_regions_held") == 0
    out["rc_bytes"] = out.get("rc_bytes", 0) + pipe.get("rc_bytes", 0)
# Zero-copy against the copy path (suites.sh, alternated rounds): throughput (MB/s)
# and the members' CPU seconds, each mode's mean, and on/off ratios.
zc = {m: [r for r in (last_json(f"zc_{m}_{i}") for i in (1, 2)) if r is not None] for m in ("on", "off")}
if zc["on"] or zc["off"]:
    def mean(mode, key):
        vals = [r.get(key, 0) for r in zc[mode]]
        return sum(vals) / len(vals) if vals else 0.0
    keys = ("throughput_mb_s", "members_cpu_s", "members_cpu_user_s")
    bench = {f"{key}_{m}": [r.get(key) for r in zc[m]] for key in keys for m in ("on", "off")}
    for key in keys:
        bench[f"{key}_ratio_on_to_off"] = round(mean("on", key) / max(mean("off", key), 1e-9), 3)
    bench["placed_on"] = sum(r.get("large_bytes_placed", 0) for r in zc["on"])
    bench["placed_off"] = sum(r.get("large_bytes_placed", 0) for r in zc["off"])
    bench["regions_held"] = sum(r.get("large_regions_held", 0) for r in zc["on"])
    out["zero_copy_bench"] = bench
    # Each mode must do what it says (WRITES with zero-copy, none without), deliver
    # everything, and free every registered buffer.
    ok = ok and len(zc["on"]) == 2 and len(zc["off"]) == 2 and \
        all(r.get("delivered_ok") for m in ("on", "off") for r in zc[m]) and \
        bench["placed_on"] > 0 and bench["placed_off"] == 0 and bench["regions_held"] == 0
bad = last_json("bad_input")
if bad is not None:
    out["bad_input"] = {k: bad.get(k) for k in ("procs", "delivered_ok", "duplicates_delivered", "bad_packets_dropped",
                                                 "spray_datagrams", "spray_link_frames") if k in bad}
    # The hostile peer must have reached the members, and they must have dropped it.
    ok = ok and bool(bad.get("delivered_ok")) and bad.get("bad_packets_dropped", 0) > 0 \
        and bad.get("spray_datagrams", 0) > 0 and bad.get("spray_link_frames", 0) > 0

# The main soak's probe: multicast works on rxe, so every member's probe is confirmed.
if soak is not None:
    out["probes_confirmed"] = soak.get("probes_confirmed")
    ok = ok and soak.get("probes_confirmed") == soak.get("procs", 0) - 1  # the killed member does not report
fb = last_json("fallback")
if fb is not None:
    out["fallback"] = {k: fb.get(k) for k in ("procs", "delivered_ok", "duplicates_delivered", "missing",
                                               "probes_failed", "members_emulating", "emulated_datagrams",
                                               "ud_multicast_datagrams") if k in fb}
    # Multicast blocked: probes fail, every member emulates, nothing is lost.
    ok = ok and bool(fb.get("delivered_ok")) and fb.get("members_emulating") == fb.get("procs") \
        and fb.get("emulated_datagrams", 0) > 0 and fb.get("probes_failed", 0) > 0

# The [.rxe] unit cases (multicast group limit, asynchronous events): Catch's last line.
events = None
events_out = results / "device_events.out"
if events_out.exists():
    m = re.search(r"All tests passed \((\d+) assertions? in (\d+) test cases?\)", events_out.read_text(errors="replace"))
    events = {"test_cases": int(m.group(2)), "assertions": int(m.group(1))} if m else {"test_cases": 0}
    out["device_events"] = events
    ok = ok and events["test_cases"] >= 2

# hmcast on verbs against Open MPI over UCX (bench/verbs_vs_ucx.py): hmcast's runs must work.
ucx = last_json("verbs_vs_ucx")
if ucx is not None:
    out["verbs_vs_ucx"] = ucx["verbs_vs_ucx"]
    out["verbs_controls"] = ucx.get("controls")
    ok = ok and bool(ucx.get("ok"))

# A full run (no HMCAST_RXE_SUITES subset) must have produced every suite's report.
if os.environ.get("HMCAST_RXE_SUITES", "all") == "all":
    for name, report in (("soak", soak), ("pipeline", pipe), ("bad_input", bad), ("fallback", fb), ("device_events", events)):
        if report is None:
            out.setdefault("missing_reports", []).append(name)
            ok = False
out["passed"] = ok
print(json.dumps(out))
sys.exit(0 if ok else 1)
