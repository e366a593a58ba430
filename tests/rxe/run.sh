#!/usr/bin/env bash
# The verbs transport on a real verbs device: boots Debian's kernel under QEMU
# (TCG, no KVM) with virtme-ng, the host's root file system shared read-only so the
# host's build runs inside, creates a Soft-RoCE device (rdma_rxe) on a dummy netdev
# with MTU 9000, runs the verbs suites there (tests/rxe/suites.sh: several member
# processes sharing the one device), and brings the results back to build/rxe/.
#
# Exits 0 only if the VM started and every suite passed. The last line printed is
# one JSON object (tests/rxe/summary.py). If the VM cannot start, it says so and
# exits non-zero: this stage is never skipped.
#
# Environment: HMCAST_RXE_TIMEOUT (seconds for the whole VM run, default 900),
# HMCAST_VNG_VENV (where the virtme-ng venv lives, default /opt/hmcast-vng as root,
# build/vng-venv otherwise),
# HMCAST_RXE_SUITES (comma-separated subset of the suites, default all).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
t_start=$(date +%s)

scripts/install-deps.sh   # qemu, Debian's kernel, rdma-core, busybox-static among the rest

# virtme-ng comes from PyPI; Debian 12's pip refuses system installs (PEP 668): a venv.
default_venv=/opt/hmcast-vng
[ "$(id -u)" -eq 0 ] || default_venv="$root/build/vng-venv"  # /opt needs root
venv="${HMCAST_VNG_VENV:-$default_venv}"
if [ ! -x "$venv/bin/vng" ]; then
  echo "rxe: installing virtme-ng into $venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q virtme-ng
fi
export PATH="$venv/bin:$PATH"   # vng runs virtme-run from the same venv

# The newest installed kernel that ships Soft-RoCE.
kernel=""
for k in $(ls -v /boot/vmlinuz-* 2>/dev/null); do
  ver="${k#/boot/vmlinuz-}"
  if find "/lib/modules/$ver" -name 'rdma_rxe.ko*' 2>/dev/null | grep -q .; then kernel="$k"; fi
done
if [ -z "$kernel" ]; then
  echo "rxe: FAILED: no kernel under /boot with the rdma_rxe module (apt-get install linux-image-amd64)"
  exit 3
fi

if [ ! -x build/bin/hmcast ]; then
  cmake --preset default >/dev/null
  cmake --build --preset default --target hmcast_cli -j "$(nproc)"
fi
t_ready=$(date +%s)

results="$root/build/rxe"
rm -rf "$results"
mkdir -p "$results"
echo "rxe: booting $kernel under QEMU (TCG) with virtme-ng; suites: ${HMCAST_RXE_SUITES:-all}"
set +e
# --disable-kvm: /dev/kvm on these machines is a nested hypervisor that cannot boot a
# stock kernel; pure emulation works. --force-9p: share the root fs over 9p.
timeout --kill-after=15 "${HMCAST_RXE_TIMEOUT:-900}" \
  vng --run "$kernel" --user root --force-9p --disable-kvm --memory 2G --cpus 2 \
      --rwdir "$results" \
      --exec "HMCAST_RXE_SUITES=${HMCAST_RXE_SUITES:-all} bash $root/tests/rxe/guest.sh $results $root/build/bin/hmcast" \
  </dev/null >"$results/vm.log" 2>&1
vm_rc=$?
set -e
t_end=$(date +%s)
sed 's/^/  vm| /' "$results/vm.log" | tail -n 40

if [ ! -s "$results/ibv_devinfo.txt" ]; then
  echo "rxe: FAILED: the VM did not start or rxe0 could not be created (vng exit $vm_rc; log: $results/vm.log)"
  exit 2
fi
echo "rxe: the VM stage took $((t_end - t_start)) s (install and build checks $((t_ready - t_start)) s, boot and suites $((t_end - t_ready)) s)"
# The figures, also kept for scripts/must-show.sh (build/rxe/summary.json).
python3 tests/rxe/summary.py "$results" "$vm_rc" "$((t_ready - t_start))" "$((t_end - t_ready))" | tee "$results/summary.json"
