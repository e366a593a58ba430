"""One member process for tests/python: joins a group (socket, shm or socket+shm transport), broadcasts
NumPy arrays and bytes if it is a sender, checks every byte it receives, and prints
JSON lines (joined, done). It stays a member until its stdin closes."""
import argparse
import json
import sys

import numpy as np

import hmcast


def content(sender, index):
    """What `sender`'s message number `index` holds: any member can regenerate it. The
    first 4 bytes name the index (little-endian): small and large messages are numbered
    apart (Delivery.seq counts per path), so the receiver reads which message it got."""
    rng = np.random.default_rng(sender * 1_000_003 + index)
    size = int(rng.integers(4, 300_000))  # datagrams and, past the policy's crossover, the large path
    a = rng.integers(0, 256, size, dtype=np.uint8)
    a[:4] = np.frombuffer(index.to_bytes(4, "little"), dtype=np.uint8)
    return a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--manager", required=True)
    ap.add_argument("--procs", type=int, required=True)
    ap.add_argument("--send", type=int, default=0, help="messages to broadcast (0: none)")
    ap.add_argument("--expect", type=int, required=True, help="messages to receive from the others")
    ap.add_argument("--expect-left", type=int, default=0, help="members whose departure must be seen")
    ap.add_argument("--transport", default="socket", choices=["socket", "shm", "socket+shm"])
    args = ap.parse_args()

    node = hmcast.Node(transport=args.transport, group_size=args.procs, manager=args.manager, join_timeout=30)
    g = node.join("pytest")
    print(json.dumps({"event": "joined", "self": g.self}), flush=True)

    done = []
    for seq in range(1, args.send + 1):
        a = content(g.self, seq)
        # NumPy arrays and bytes alike: anything with the buffer protocol.
        done.append(g.broadcast(a if seq % 2 else a.tobytes()))
    for c in done:
        c.result(timeout=60)

    got, bad, left, views = 0, 0, [], 0
    seen = set()
    while got < args.expect or len(left) < args.expect_left:
        e = g.receive(timeout=60)
        if e is None:
            break
        if isinstance(e, hmcast.ViewChange):
            views += 1
            left += list(e.left)
            continue
        got += 1
        # The delivery's bytes without a copy, against the regenerated message.
        view = np.frombuffer(e, dtype=np.uint8)
        index = int.from_bytes(view[:4].tobytes(), "little") if view.size >= 4 else 0
        if (e.sender, index) in seen or index < 1 or index > 1_000_000 or \
                not np.array_equal(view, content(e.sender, index)):
            bad += 1  # a duplicate, or bytes that are not the message they say they are
        seen.add((e.sender, index))
    print(json.dumps({"event": "done", "self": g.self, "received": got, "bad": bad, "views": views,
                      "left": left, "completed": g.stats()["completed"] + g.stats()["large_completed"]}),
          flush=True)
    sys.stdin.read()  # stay a member until the test says all are done
    g.leave()


if __name__ == "__main__":
    main()
