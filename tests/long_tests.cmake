# Read by ctest after the discovered Catch tests: the longest tests get a cost, so
# that `ctest -j` starts them first instead of ending on one of them alone (a fresh
# build has no timing history to order by). ctest ignores a name that no longer
# exists: a renamed test only loses its place at the front.
set(_hmcast_long_tests
    "randomized: multi-datagram messages, several senders and loss keep latency and repair bounded"
    "sealed link: a group with a key delivers small and large messages, under loss"
    "segments: every member ends with the sender's exact bytes, for odd sizes and segment sizes"
    "faults: a group under loss, duplication, reordering and delay delivers everything once, in order"
    "randomized simulation keeps every promise"
    "seq window: behaves as an ordered map under seeded inserts and prefix erases"
    "sequential: exhaustive small groups"
    "multi-fragment messages under incast cause no repair storm")
set(_hmcast_cost 100)
foreach(_name IN LISTS _hmcast_long_tests)
  set_tests_properties("${_name}" PROPERTIES COST ${_hmcast_cost})
  math(EXPR _hmcast_cost "${_hmcast_cost} - 1")
endforeach()
