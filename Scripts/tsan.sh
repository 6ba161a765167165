#!/usr/bin/env bash
# ThreadSanitizer run: the concurrency suites and a short stress run, built with
# -DSNAPSHOTDB_TSAN so that every Mutex is one TSan sees: Swift's Synchronization.Mutex is
# invisible to TSan on Linux, and without this every guarded access is reported as a race.
# Every target takes `Mutex` from SnapshotDBLocking (Sources/SnapshotDBLocking/Mutex.swift),
# which is Synchronization.Mutex in other builds and a pthread mutex in this one. Exits non-zero
# on the first report (halt_on_error).
#   Scripts/tsan.sh                 # suites + 25 s of stress
#   Scripts/tsan.sh --duration 60   # longer stress
#   Scripts/tsan.sh --suites-only   # what CI runs
# Under TSan everything runs 10-30 times slower, so the stress run has two writers and two
# readers: with more, bookmarks lag so far behind that the WAL-bound checks (timing invariants,
# not races) fail.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=25
suitesOnly=0
case "${1:-}" in
  --duration) duration="$2" ;;
  --suites-only) suitesOnly=1 ;;
esac
# A file that imported all of Synchronization would lock Synchronization.Mutex here, unseen.
if grep -rnE '^[[:space:]]*(@_exported )?((internal|public|package) )?import Synchronization[[:space:]]*$' \
  Sources Tests Package.swift; then
  echo "tsan: the files above import all of Synchronization; take Mutex from SnapshotDBLocking" \
    "and import 'struct Synchronization.Atomic' where Atomic is needed" >&2
  exit 1
fi
flags=(--sanitize=thread --scratch-path .build-tsan -Xswiftc -DSNAPSHOTDB_TSAN)
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
suites='CheckpointConcurrencyTests|LongLivedReadTests|WriterContractTests|ViewTests|ViewSharingTests|TransactionTests|MisuseTests|ChangeSummaryTests|LifecycleTests|BusyTests|HistoryTests|ConsumerTests|FileTests|ReleaseTests|ObservationTests|QueryBoundsTests|ConfigurationTests|ReadReplicaTests|FastJSONTests|WriterTurnsTests|LiveViewTests|MigrationTests|ReadOnlyOpenTests'
echo "tsan: building (a separate scratch path, .build-tsan)" >&2
swift build --build-tests "${flags[@]}" >&2
echo "tsan: concurrency suites" >&2
swift test --skip-build "${flags[@]}" --filter "$suites"
[ "$suitesOnly" -eq 1 ] && exit 0
echo "tsan: stress for ${duration} s (crash rounds off: their children are killed on purpose)" >&2
bin="$(swift build "${flags[@]}" --show-bin-path)"
"$bin/snapshotdb-stress" --duration "$duration" --writers 2 --readers 2 --no-crash-rounds
