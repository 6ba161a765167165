#ifndef SNAPSHOTDB_BENCHMARKS_CCALLGRIND_H
#define SNAPSHOTDB_BENCHMARKS_CCALLGRIND_H

/// Toggles callgrind's event collection (`CALLGRIND_TOGGLE_COLLECT`): run the benchmarks under
/// `valgrind --tool=callgrind --collect-atstart=no` to count only the measured parts. Outside
/// valgrind, and where valgrind's headers are missing, it does nothing.
void benchmark_callgrind_toggle_collect(void);

#endif
