#!/usr/bin/env python3
"""The baseline of `hmcast cp`'s benchmark: a directory tree copied to one host
over one TCP stream, as scp -r or rsync would without their encryption and
checksums (GNU tar on both ends, so the copy itself costs what tar costs).

  tree_copy.py recv PORT DIR          listen, extract one tree into DIR, exit
  tree_copy.py send HOST PORT PATH    send the tree at PATH; returns once the
                                      receiver has written all of it
"""
import socket
import subprocess
import sys


def recv(port, into):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    srv.settimeout(120)
    print("listening", flush=True)
    conn, _ = srv.accept()
    conn.settimeout(None)
    subprocess.run(["mkdir", "-p", into], check=True)
    rc = subprocess.run(["tar", "-x", "-C", into, "-f", "-"], stdin=conn.fileno()).returncode
    if rc != 0:
        sys.exit("tree_copy.py: tar -x failed (%d)" % rc)
    conn.sendall(b"k")  # the sender returns only once everything is written


def send(host, port, path):
    conn = socket.create_connection((host, port), timeout=120)
    conn.settimeout(None)
    parent, _, name = path.rstrip("/").rpartition("/")
    rc = subprocess.run(["tar", "-c", "-C", parent or "/", "-f", "-", name], stdout=conn.fileno()).returncode
    if rc != 0:
        sys.exit("tree_copy.py: tar -c failed (%d)" % rc)
    conn.shutdown(socket.SHUT_WR)
    if conn.recv(1) != b"k":
        sys.exit("tree_copy.py: the receiver did not confirm")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "recv":
        recv(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(__doc__)
