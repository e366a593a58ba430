#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds examples/hello_group.cpp
# outside the tree against it twice (through find_package(hmcast), shared and static,
# and through pkg-config) and runs each, imports the installed Python module, and
# installs the module with `pip install .` into a venv and runs it from there.
# Usage: tests/install/run.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
fail() { echo "FAILED: $*"; exit 1; }

# Only the public headers are installed; the shared library carries its SONAME.
[ -f "$prefix/include/hmcast/hmcast.hpp" ] || fail "public headers not installed"
public=$(ls include/hmcast | sort)
extra=$(cd "$prefix/include" && find . -type f | sed 's|^\./hmcast/||' | sort | comm -13 <(echo "$public") -)
[ -z "$extra" ] || fail "private headers installed: $extra"
soname=$(readelf -d "$prefix/lib/libhmcast.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ -e "$prefix/lib/$soname" ] || fail "libhmcast.so has no SONAME, or it is not installed"
for f in lib/libhmcast.a bin/hmcast lib/pkgconfig/hmcast.pc lib/cmake/hmcast/hmcastConfig.cmake; do
  [ -e "$prefix/$f" ] || fail "$f not installed"
done
echo "installed: headers, $soname, libhmcast.a, bin/hmcast, hmcast.pc, the CMake package$( [ -e "$prefix/lib/libhmcast_mpi.so" ] && echo ', libhmcast_mpi.so')"

# find_package(hmcast): hmcast::hmcast (shared) and hmcast::hmcast_static.
cmake -S tests/install/find_package -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$work/cmake/hello_shared" | tail -n 1
ldd "$work/cmake/hello_shared" | grep -q "$prefix/lib/$soname" || fail "hello_shared does not load the installed $soname"
"$work/cmake/hello_static" | tail -n 1
echo "find_package(hmcast): shared and static consumers built and ran"

# pkg-config: shared, then static (--static adds rdma-core's libraries).
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
c++ examples/hello_group.cpp -o "$work/pc_shared" $(pkg-config --cflags --libs hmcast)
LD_LIBRARY_PATH="$prefix/lib" "$work/pc_shared" | tail -n 1
# shellcheck disable=SC2046
c++ examples/hello_group.cpp -o "$work/pc_static" -static-libstdc++ $(pkg-config --cflags hmcast) \
  "$prefix/lib/libhmcast.a" $(pkg-config --static --libs-only-l hmcast | sed 's/-lhmcast//')
"$work/pc_static" | tail -n 1
echo "pkg-config hmcast: shared and static consumers built and ran"

# The Python module from the installed tree.
if [ -d "$prefix/lib/python3/dist-packages" ]; then
  PYTHONPATH="$prefix/lib/python3/dist-packages" /usr/bin/python3 -c \
    "import hmcast; n = hmcast.Node(transport='inproc'); g = n.join('x'); g.broadcast(b'hi').result(5); print('python:', g.receive(5))"
  echo "python3 -c 'import hmcast' from the installed tree: it ran"
else
  fail "the Python module was not installed (apt-get install pybind11-dev python3-dev)"
fi

# pip install . (pyproject.toml: scikit-build-core and pybind11 from PyPI build the
# module from this CMake tree) into a fresh venv, then import and use it from there.
/usr/bin/python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check . >"$work/pip.log" 2>&1 ||
  { tail -n 30 "$work/pip.log"; fail "pip install . (PyPI must be reachable for scikit-build-core and pybind11)"; }
(cd "$work" && "$work/venv/bin/python" -c \
  "import hmcast; n = hmcast.Node(transport='inproc'); g = n.join('x'); g.broadcast(b'hi').result(5); d = g.receive(5); assert d.tobytes() == b'hi', d; print('pip-installed', hmcast.__file__.rsplit('/', 1)[-1], 'delivered', d.tobytes())")
echo "pip install . into a venv: import hmcast from it ran"
