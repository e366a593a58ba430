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


def start_manager(*extra):
    port = free_port()
    proc = subprocess.Popen([TOOL, "manager", "--listen", f"127.0.0.1:{port}", "--exit-after", "120", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the manager did not start listening"
            time.sleep(0.05)
    return proc, f"127.0.0.1:{port}"


@pytest.fixture
def manager():
    proc, address = start_manager()
    yield address
    proc.kill()
    proc.wait(timeout=10)


def start(manager, procs, send, expect, expect_left=0, transport="socket"):
    cmd = [sys.executable, str(HERE / "member.py"), "--manager", manager, "--procs", str(procs),
           "--send", str(send), "--expect", str(expect), "--expect-left", str(expect_left), "--transport", transport]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def read_event(proc, name, timeout=90):
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        ev = json.loads(line)
        if ev["event"] == name:
            return ev
        assert time.monotonic() < deadline
    raise AssertionError(f"member exited before '{name}' (exit {proc.wait()})")


def join_all(nodes, name):
    """Every node joins group `name` at once (a join waits for the whole group)."""
    import threading

    groups = [None] * len(nodes)
    joiners = [threading.Thread(target=lambda i=i: groups.__setitem__(i, nodes[i].join(name))) for i in range(len(nodes))]
    for t in joiners:
        t.start()
    for t in joiners:
        t.join(timeout=60)
    assert all(g is not None for g in groups), f"the {len(nodes)} members did not join"
    return groups


def finish(members):
    for p in members:
        p.stdin.close()
    for p in members:
        assert p.wait(timeout=30) == 0


@pytest.mark.parametrize("transport", ["socket", "shm", "socket+shm"])
def test_four_processes_numpy_and_bytes(manager, transport):
    senders, messages = 4, 12
    # Every member delivers every message, its own included.
    members = [start(manager, 4, messages if i < senders else 0, senders * messages, transport=transport)
               for i in range(4)]
    try:
        done = [read_event(p, "done") for p in members]
        for d in done:
            assert d["bad"] == 0 and d["received"] == senders * messages, d
        assert sum(d["completed"] for d in done) == senders * messages
    finally:
        finish(members)


@pytest.mark.parametrize("transport", ["socket", "shm", "socket+shm"])
def test_killed_member_is_a_view_change(manager, transport):
    senders, messages = 2, 8
    # The victim is a receiver: the others expect every message and its departure.
    members = [start(manager, 4, messages if i < senders else 0, senders * messages,
                     expect_left=1 if i < 3 else 0, transport=transport) for i in range(4)]
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


def test_a_stopped_group_raises_in_receive():
    """When the group stops for a member (here: its manager dies), a receive() that
    would wait for ever raises hmcast.Error with the reason, and so does every later one."""
    import hmcast

    proc, address = start_manager()
    try:
        nodes = [hmcast.Node(transport="socket", group_size=2, manager=address, join_timeout=30) for _ in range(2)]
        groups = join_all(nodes, "stops")
        groups[0].broadcast(b"before").result(timeout=30)
        first = groups[1].receive(timeout=30)
        while not isinstance(first, hmcast.Delivery):  # the first view comes first
            first = groups[1].receive(timeout=30)
        assert first.tobytes() == b"before"
        proc.kill()
        proc.wait(timeout=10)
        for _ in range(2):
            with pytest.raises(hmcast.Error, match="manager"):
                while True:  # view changes may come first; then the stop, for ever
                    assert groups[1].receive(timeout=30) is not None, "receive() waited 30 s without raising"
        for g in groups:
            g.leave()
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_group_key_from_python(tmp_path):
    """Node(key_file=...) proves the key to the manager and tags every frame: two
    members with the key exchange a message, nothing is refused; a member without
    the key is refused by the manager, and a key file others may read is refused."""
    import hmcast

    key = tmp_path / "group.key"
    subprocess.run([TOOL, "keygen", "--out", str(key)], check=True, stdout=subprocess.DEVNULL)
    proc, address = start_manager("--key-file", str(key))
    try:
        nodes = [hmcast.Node(transport="socket", group_size=2, manager=address, join_timeout=30, key_file=str(key))
                 for _ in range(2)]
        groups = join_all(nodes, "keyed")
        groups[0].broadcast(b"sealed").result(timeout=30)
        got = groups[1].receive(timeout=30)
        while not isinstance(got, hmcast.Delivery):
            got = groups[1].receive(timeout=30)
        assert got.tobytes() == b"sealed"
        for g in groups:
            assert g.stats()["auth_failures"] == 0
            g.leave()
        with pytest.raises(hmcast.Error, match="hold the group key"):
            hmcast.Node(transport="socket", group_size=2, manager=address, join_timeout=30).join("keyed")
        key.chmod(0o644)
        with pytest.raises(hmcast.Error, match="chmod 600"):
            hmcast.Node(transport="socket", group_size=2, manager=address, key_file=str(key))
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_progress_in_the_caller():
    """Node(progress="caller"): no progress thread; receive() and result() make the
    progress they wait for, and nothing arrives while nobody calls."""
    import threading

    import hmcast

    nodes = [hmcast.Node(transport="inproc", group_size=2, fabric="py-caller", progress="caller") for _ in range(2)]
    sender, receiver = join_all(nodes, "caller")
    got = []

    def receive():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            e = receiver.receive(timeout=1)
            if e is not None and not isinstance(e, hmcast.ViewChange):
                got.append(bytes(e))
                return

    c = sender.broadcast(b"hello from the caller")
    with pytest.raises(TimeoutError):
        c.result(timeout=0.2)  # the receiver makes no calls yet: no ACK
    t = threading.Thread(target=receive)
    t.start()
    c.result(timeout=30)
    t.join(timeout=40)
    assert got == [b"hello from the caller"]
    receiver.poll(0.01)
    with pytest.raises(ValueError):
        hmcast.Node(transport="inproc", progress="sometimes")


def test_broadcast_from_sends_a_buffer_in_place():
    """broadcast_from(): a large buffer goes from where it lies and the call returns
    once every member holds it; the sender's own delivery, read after the buffer has
    changed, still has the bytes sent (it is a copy), and so has the receiver's."""
    import hmcast

    nodes = [hmcast.Node(transport="inproc", group_size=2, fabric="py-lent") for _ in range(2)]
    sender, receiver = join_all(nodes, "lent")
    size = 3 << 20  # over the small route: the large path, from the buffer itself
    data = bytearray(bytes(range(256)) * (size // 256))
    want = bytes(data)
    sender.broadcast_from(memoryview(data))
    data[:] = b"\xee" * size  # the caller's again at once

    def next_delivery(g):
        e = g.receive(timeout=30)
        while e is not None and not isinstance(e, hmcast.Delivery):
            e = g.receive(timeout=30)
        assert e is not None, "no delivery within 30 s"
        return e

    assert next_delivery(sender).tobytes() == want
    assert next_delivery(receiver).tobytes() == want
    with pytest.raises(ValueError):
        sender.broadcast_from(memoryview(bytearray(8 << 20))[::2])  # not contiguous
    for g in (sender, receiver):
        g.leave()


def test_broadcast_lent_sends_without_waiting_and_takes_back():
    """broadcast_lent(): the buffer goes from where it lies while the caller goes on;
    take_back() says when it is the caller's again, with the outcome in completion.
    A small one is copied (lent False); a dropped LentSend waits for its buffer."""
    import hmcast

    nodes = [hmcast.Node(transport="inproc", group_size=2, fabric="py-lent-async") for _ in range(2)]
    sender, receiver = join_all(nodes, "lent-async")
    size = 3 << 20
    first = bytearray(bytes(range(256)) * (size // 256))
    second = bytearray(b"\x5a" * (size - 7))
    want = [bytes(first), bytes(second), b"small"]
    a = sender.broadcast_lent(first)
    b = sender.broadcast_lent(memoryview(second))
    c = sender.broadcast_lent(b"small")
    assert a.lent and b.lent and not c.lent
    with pytest.raises(BufferError):
        first.extend(b"x")  # held by the group until taken back
    assert a.take_back(timeout=30)
    a.completion.result(timeout=30)
    first[:] = b"\xee" * size  # the caller's again
    first.extend(b"x")
    del b  # waits for the group to let go
    second[:] = b"\xee" * len(second)
    assert c.take_back(timeout=0)
    c.completion.result(timeout=30)

    def deliveries(g, n):
        got = []
        while len(got) < n:
            e = g.receive(timeout=30)
            assert e is not None, "no delivery within 30 s"
            if isinstance(e, hmcast.Delivery):
                got.append(e.tobytes())
        return sorted(got)

    assert deliveries(receiver, 3) == sorted(want)
    assert deliveries(sender, 3) == sorted(want)
    with pytest.raises(ValueError):
        sender.broadcast_lent(memoryview(bytearray(8 << 20))[::2])  # not contiguous
    for g in (sender, receiver):
        g.leave()
