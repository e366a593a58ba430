#!/usr/bin/env python3
"""The layer rule as a test: protocol code is sans-I/O.

Files in the protocol folders may include only other protocol folders, the
public types (hmcast/types.hpp, config.hpp, error.hpp) and standard headers that
do no I/O and tell no time. Anything else (a transport, the runtime, the API,
the testing library, an OS header such as <sys/socket.h>, a clock such as
<chrono>, threads) fails the test, naming file, line and include.

  tests/layer_check.py [SRC_DIR]     check the tree (default: src/ next to tests/)
  tests/layer_check.py --self-test   check that the checker catches a bad include
"""
import os
import re
import sys
import tempfile

PROTOCOL = ["core", "group", "small", "ack_tree", "large", "membership", "policy"]
PUBLIC = {"hmcast/types.hpp", "hmcast/config.hpp", "hmcast/error.hpp"}
STANDARD = {
    "algorithm", "array", "bit", "charconv", "cmath", "compare", "concepts", "cstddef", "cstdint",
    "cstdio", "cstdlib", "cstring", "deque", "fstream", "functional", "initializer_list", "iterator",
    "limits", "map", "memory", "numeric", "optional", "queue", "set", "span", "sstream", "stdexcept",
    "string", "string_view", "tuple", "type_traits", "unordered_map", "unordered_set", "utility",
    "variant", "vector",
}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def problems(src):
    found = []
    for folder in PROTOCOL:
        top = os.path.join(src, folder)
        for root, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith((".hpp", ".cpp", ".h")):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    for no, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        kind, target = m.groups()
                        ok = (target in STANDARD if kind == "<" else
                              target in PUBLIC or target.split("/")[0] in PROTOCOL)
                        if not ok:
                            rel = os.path.relpath(path, src)
                            found.append(f"{rel}:{no}: protocol code includes {kind}{target}"
                                         f"{'>' if kind == '<' else chr(34)}")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "small"))
        with open(os.path.join(d, "small", "ok.hpp"), "w") as f:
            f.write('#include <vector>\n#include "core/wire.hpp"\n')
        if problems(d):
            print("self-test: a clean file was flagged")
            return 1
        with open(os.path.join(d, "small", "bad.cpp"), "w") as f:
            f.write('#include <vector>\n#include <sys/socket.h>\n#include "transport/socket/net_util.hpp"\n'
                    '#include <chrono>\n')
        found = problems(d)
        if len(found) != 3 or "sys/socket.h" not in found[0]:
            print("self-test: expected 3 problems, got", found)
            return 1
    print("self-test: the checker flags <sys/socket.h>, a transport header and <chrono>")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    found = problems(src)
    for p in found:
        print(p)
    if found:
        print(f"{len(found)} include(s) break the layer rule (protocol folders: {', '.join(PROTOCOL)}); "
              "move the I/O to src/runtime, src/transport or src/api")
        return 1
    print(f"layer rule holds in {', '.join(PROTOCOL)}")
    return 0


sys.exit(main())
