# The verbs suites run inside the VM (sourced by guest.sh: run_suite, $hm, $out).
# Sizes are small: under TCG emulation everything runs 10-50x slower than native.
VERBS=(--transport verbs --device rxe0 --interface-template 10.77.0.1)
want() { [ "$SUITES" = all ] || [[ ",$SUITES," == *",$1,"* ]]; }

# The soak: mixed sizes, two senders, 2% of datagrams dropped at each receiver, one
# member SIGKILLed mid-run (views_installed >= 2), every byte checked at every member.
# Multicast works on rxe: every member's probe must be confirmed (10 s: TCG is slow).
want soak && run_suite soak 400 "$hm" soak "${VERBS[@]}" --procs 5 --senders 2 --messages 150 \
  --sizes 64:40,512:20,2KiB:20,8KiB:15 --loss 0.02 --kill 1 --probe-deadline-ms 10000 --timeout 300 --json

# The pipeline: large messages (RC blocks, binomial pipeline) in a group of odd size,
# with completions taken by interrupts only (the other suites use hybrid polling).
want pipeline && run_suite pipeline 400 "$hm" soak "${VERBS[@]}" --completion interrupt --procs 5 --senders 2 \
  --messages 2 --sizes 3MiB:1,1536KiB:1 --timeout 300 --json

# Zero-copy against the copy path, side by side: 4 MiB messages from one sender to 3
# receivers, blocks RDMA WRITTEN into the final buffers or SENT into link buffers
# and copied (--no-zero-copy), alternated twice, completions by interrupts so the
# members' CPU time is work, not polling. summary.py prints throughput and CPU and
# their ratios; the runs must deliver everything, the speed is only reported.
if want zero_copy_bench; then
  for round in 1 2; do
    run_suite "zc_on_$round" 300 "$hm" soak "${VERBS[@]}" --procs 4 --senders 1 --messages 10 \
      --sizes 4MiB:1 --completion interrupt --timeout 200 --json
    run_suite "zc_off_$round" 300 "$hm" soak "${VERBS[@]}" --procs 4 --senders 1 --messages 10 \
      --sizes 4MiB:1 --completion interrupt --timeout 200 --json --no-zero-copy
  done
fi

# Bad input: a non-member verbs endpoint sprays the group's UD multicast with garbage,
# truncated, corrupted, stale-view, future-view, other-group and non-member datagrams,
# and sends such frames over RC links to every member; nothing bad may be delivered.
want bad_input && run_suite bad_input 300 "$hm" soak "${VERBS[@]}" --procs 4 --senders 2 --messages 800 \
  --sizes 64:40,2KiB:20 --spray --timeout 200 --json

# Multicast that does not work: every member drops every datagram it receives, so
# the probe after joining goes unconfirmed and the manager switches the whole group
# to multicast emulated over RC; every message must still arrive, once. The deadline
# is short so the switch comes well before the run ends: repairs over RC alone can
# finish it, and a member that finished before the switch was not counted (a flake).
want fallback && run_suite fallback 400 "$hm" soak "${VERBS[@]}" --procs 4 --senders 2 --messages 100 \
  --sizes 64:40,2KiB:20,8KiB:10 --block-multicast --probe-deadline-ms 500 --timeout 300 --json

# The transport's own behaviour on the device (tests/verbs_test.cpp, cases tagged
# [.rxe]): a multicast group takes max_mcast_qp_attach QPs and one more fails with the
# message naming the limit; taking the netdev down ends every endpoint of a process
# with IBV_EVENT_PORT_ERR (the asynchronous events). Last: it takes d0 down and up.
want device_events && run_suite device_events 300 env HMCAST_RXE_DEVICE=rxe0 HMCAST_RXE_ADDRESS=10.77.0.1 \
  HMCAST_RXE_NETDEV=d0 "$(dirname "$hm")/hmcast_tests" "[.rxe]"

# Verbs against Open MPI over UCX on the same device (bench/verbs_vs_ucx.py; asked for
# by bench/compare_mpi.sh --verbs). Not part of "all": under TCG only the ratios mean
# anything, and the runs take minutes. Passes if hmcast's runs did; Open MPI's failures
# are reported with UCX's error.
[[ ",$SUITES," == *",verbs_vs_ucx,"* ]] && run_suite verbs_vs_ucx 1500 /usr/bin/python3 \
  "$(dirname "$0")/../../bench/verbs_vs_ucx.py" "$(dirname "$hm")"
true
