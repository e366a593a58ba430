"""The Python module in real processes: 4 members on loopback over the socket
transport (a manager on a free port), NumPy arrays and bytes, every byte checked;
a member killed mid-run is reported to the survivors as a view change."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
TOOL = os.environ.get("HMCAST_TOOL", str(HERE.parent.parent / "build" / "bin" / "hmcast"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def manager():
    port = free_port()
    proc = subprocess.Popen([TOOL, "manager", "--listen", f"127.0.0.1:{port}", "--exit-after", "120"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the manager did not start listening"
            time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    proc.kill()
    proc.wait(timeout=10)


def start(manager, procs, send, expect, expect_left=0):
    cmd = [sys.executable, str(HERE / "member.py"), "--manager", manager, "--procs", str(procs),
           "--send", str(send), "--expect", str(expect), "--expect-left", str(expect_left)]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def read_event(proc, name, timeout=90):
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        ev = json.loads(line)
        if ev["event"] == name:
            return ev
        assert time.monotonic() < deadline
    raise AssertionError(f"member exited before '{name}' (exit {proc.wait()})")


def finish(members):
    for p in members:
        p.stdin.close()
    for p in members:
        assert p.wait(timeout=30) == 0


def test_four_processes_numpy_and_bytes(manager):
    senders, messages = 4, 12
    # Every member delivers every message, its own included.
    members = [start(manager, 4, messages if i < senders else 0, senders * messages) for i in range(4)]
    try:
        done = [read_event(p, "done") for p in members]
        for d in done:
            assert d["bad"] == 0 and d["received"] == senders * messages, d
        assert sum(d["completed"] for d in done) == senders * messages
    finally:
        finish(members)


def test_killed_member_is_a_view_change(manager):
    senders, messages = 2, 8
    # The victim is a receiver: the others expect every message and its departure.
    members = [start(manager, 4, messages if i < senders else 0, senders * messages,
                     expect_left=1 if i < 3 else 0) for i in range(4)]
    victim = members[3]
    victim_id = read_event(victim, "joined")["self"]
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    survivors = members[:3]
    try:
        done = [read_event(p, "done") for p in survivors]
        for d in done:
            assert d["bad"] == 0 and d["received"] == senders * messages, d
            assert d["left"] == [victim_id] and d["views"] >= 1, d
    finally:
        finish(survivors)
