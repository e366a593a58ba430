#!/usr/bin/env python3
"""One unicast of SIZE bytes over TCP, the baseline of the large-message runs.

  unicast.py recv PORT SIZE          listen, read SIZE bytes, print the CLOCK_MONOTONIC
                                     time (ns) the last byte arrived, exit
  unicast.py send HOST PORT SIZE     connect, print the start time (ns), send SIZE bytes

Both ends run on one machine (network namespaces), so their CLOCK_MONOTONIC
readings compare directly: arrival minus start is the transfer time.
"""
import socket
import sys
import time


def recv(port, size):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    srv.settimeout(60)
    print("listening", flush=True)
    conn, _ = srv.accept()
    conn.settimeout(120)
    buf = bytearray(1 << 20)
    got = 0
    while got < size:
        n = conn.recv_into(buf, min(len(buf), size - got))
        if n == 0:
            sys.exit("unicast.py: sender closed after %d of %d bytes" % (got, size))
        got += n
    print(time.monotonic_ns(), flush=True)
    conn.sendall(b"k")  # lets the sender close only after everything arrived


def send(host, port, size):
    conn = socket.create_connection((host, port), timeout=60)
    chunk = bytes(1 << 20)
    start = time.monotonic_ns()
    left = size
    while left > 0:
        n = min(left, len(chunk))
        conn.sendall(chunk[:n])
        left -= n
    conn.settimeout(120)
    conn.recv(1)
    print(start, flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "recv":
        recv(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) == 5 and sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)
