"""The README's examples, run as written there: the Python example (4 processes on
loopback, with a manager on a free port) and the one-host `hmcast cp` command."""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from test_broadcast import TOOL, start_manager

ROOT = Path(__file__).parent.parent.parent
README = (ROOT / "README.md").read_text()


def indented_block(after_heading, first_line_start):
    """The indented code block of the section `after_heading` whose first line
    starts with `first_line_start`, dedented."""
    section = README[README.index(after_heading):]
    lines = section.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("    " + first_line_start))
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    return "\n".join(block).rstrip() + "\n"


def test_python_example_runs_as_written():
    code = indented_block("## From Python", "import sys, hmcast")
    proc, address = start_manager()
    try:
        with tempfile.TemporaryDirectory() as d:
            script = Path(d) / "weights.py"
            script.write_text(code)
            env = dict(os.environ)
            members = [subprocess.Popen([sys.executable, str(script), address], env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                       for _ in range(4)]
            for m in members:
                out, err = m.communicate(timeout=90)
                assert m.returncode == 0, f"the README's Python example failed: {err}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_cp_example_runs_as_written():
    block = indented_block("## Copying files to every host", "# on each of the receiving hosts")
    line = next(l for l in block.splitlines() if l.startswith("build/bin/hmcast cp --spawn"))
    assert os.path.exists(ROOT / "build" / "bin" / "hmcast"), "the README's command uses build/bin/hmcast"
    with tempfile.TemporaryDirectory() as tmp:  # where the command's mktemp -d puts the copies
        r = subprocess.run(["bash", "-c", line], cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, TMPDIR=tmp))
        assert r.returncode == 0, f"`{line}` failed: {r.stderr}"
        m = re.search(r"(\d+) of (\d+) verified every file", r.stderr)
        assert m and m.group(1) == m.group(2) == "3", r.stderr
        copies = sorted(Path(tmp).glob("*/copy*/examples"))
        assert len(copies) == 3, copies
        for c in copies:
            assert subprocess.run(["diff", "-r", str(ROOT / "examples"), str(c)]).returncode == 0
