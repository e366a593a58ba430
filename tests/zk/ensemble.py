#!/usr/bin/env python3
"""A real ZooKeeper ensemble on loopback for the tests (Debian's `zookeeper` package).

    tests/zk/ensemble.py [--servers 3] [--timeout S] -- COMMAND ARGS...

starts the servers on free ports in a temporary directory, waits until they have
elected a leader, runs COMMAND with
    HMCAST_ZK=127.0.0.1:p1,127.0.0.1:p2,...   (the connect string)
    HMCAST_ZK_PIDS=p1:pid1,p2:pid2,...        (each server's client port and pid, so a
                                               test can kill one, the leader say)
stops every server (SIGKILL, then waits) and removes the directory whatever happens,
and exits with COMMAND's status. Bounded: the servers get --timeout seconds to come
up, COMMAND the same again.
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

CLASSPATH = "/usr/share/java/zookeeper.jar"  # its manifest names the jars it needs
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def free_ports(n):
    """n distinct ports the kernel calls free now (bound, then released)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def four_letter(port, word, timeout=1.0):
    """A four-letter-word command's answer ('' if the server does not answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            out = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                out += chunk
            return out.decode(errors="replace")
    except OSError:
        return ""


def mode(port):
    for line in four_letter(port, "srvr").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return ""


class Ensemble:
    def __init__(self, servers):
        self.dir = tempfile.mkdtemp(prefix="hmcast-zk-")
        ports = free_ports(3 * servers)
        self.client = ports[0::3]
        quorum, election = ports[1::3], ports[2::3]
        self.procs = []
        members = "".join(f"server.{i + 1}=127.0.0.1:{quorum[i]}:{election[i]}\n" for i in range(servers))
        for i in range(servers):
            d = os.path.join(self.dir, f"s{i + 1}")
            os.makedirs(os.path.join(d, "data"))
            with open(os.path.join(d, "data", "myid"), "w") as f:
                f.write(f"{i + 1}\n")
            cfg = os.path.join(d, "zoo.cfg")
            with open(cfg, "w") as f:
                # Short ticks: a test's session timeouts and elections take a second or two.
                f.write(f"tickTime=200\ninitLimit=25\nsyncLimit=10\ndataDir={d}/data\n"
                        f"clientPort={self.client[i]}\nclientPortAddress=127.0.0.1\n"
                        "admin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n"
                        "minSessionTimeout=400\nmaxSessionTimeout=20000\n" + members)
            log = open(os.path.join(d, "server.log"), "w")
            self.procs.append(subprocess.Popen(
                ["java", "-Xmx96m", "-Dzookeeper.log.dir=" + d, "-cp", CLASSPATH, MAIN, cfg],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def connect_string(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.client)

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            modes = [mode(p) for p in self.client]
            if modes.count("leader") == 1 and modes.count("follower") == len(self.client) - 1:
                return modes
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        raise RuntimeError("the ZooKeeper ensemble did not elect a leader within %ds; server logs in %s"
                           % (timeout, self.dir))

    def stop(self, keep_logs=False):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in self.procs:
            p.wait()
        if not keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=90)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("name the command to run against the ensemble")
    if shutil.which("java") is None or not os.path.exists(CLASSPATH):
        print("ensemble.py: ZooKeeper is not installed: run scripts/install-deps.sh", file=sys.stderr)
        return 2
    ens = Ensemble(a.servers)
    ok = False
    try:
        t0 = time.monotonic()
        modes = ens.wait_ready(a.timeout)
        print("ensemble.py: %d servers up in %.1f s (%s) at %s" % (a.servers, time.monotonic() - t0,
              ", ".join(modes), ens.connect_string()), flush=True)
        env = dict(os.environ, HMCAST_ZK=ens.connect_string(),
                   HMCAST_ZK_PIDS=",".join(f"{port}:{p.pid}" for port, p in zip(ens.client, ens.procs)))
        rc = subprocess.run(cmd, env=env, timeout=a.timeout, stdin=subprocess.DEVNULL).returncode
        ok = rc == 0
        return rc
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print("ensemble.py: " + str(e), file=sys.stderr)
        return 1
    finally:
        ens.stop(keep_logs=not ok)
        if not ok:
            print("ensemble.py: server logs kept in " + ens.dir, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
