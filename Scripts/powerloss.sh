#!/usr/bin/env bash
# Power-loss crash-state test: traces every write and sync of a workload (an LD_PRELOAD shim,
# Tests/PowerLoss/trace.c), builds the states a power cut could leave (whatever was synced is
# durable; later writes persist in any subset, torn at 512-byte sectors) and checks each with the
# sqlite3 shell and the library (Tests/PowerLoss/replay.py). SnapshotDB (FULL and NORMAL) is held
# to what plain SQLite shows under the same model (the reference, which must pass too), and a
# negative control that ignores syncs must find violations, or the checker is blind.
#   Scripts/powerloss.sh [--commits N] [--states N]
set -euo pipefail
cd "$(dirname "$0")/.."
commits=120
states=60
while [ $# -gt 0 ]; do
  case "$1" in
    --commits) commits="$2"; shift 2 ;;
    --states) states="$2"; shift 2 ;;
    *) echo "usage: $0 [--commits N] [--states N]" >&2; exit 64 ;;
  esac
done
work="$(mktemp -d /tmp/snapshotdb-powerloss-XXXXXX)"
trap 'rm -rf "$work"' EXIT
cc -shared -fPIC -O1 -o "$work/trace.so" Tests/PowerLoss/trace.c -ldl
swift build -c release --product snapshotdb-stress >&2
stress="$(swift build -c release --show-bin-path)/snapshotdb-stress"

trace() {  # trace NAME COMMAND...: runs COMMAND with the shim, recording files under $work/NAME/
  local name="$1"; shift
  mkdir -p "$work/$name"
  : > "$work/$name/marks"
  POWERLOSS_PREFIX="$work/$name/" POWERLOSS_MARKS="$work/$name/marks" POWERLOSS_LOG="$work/$name.trace" \
    LD_PRELOAD="$work/trace.so" "$@"
}

failed=0
for sync in full normal; do
  trace "snapshotdb-$sync" "$stress" power-loss-workload --db "$work/snapshotdb-$sync/db.sqlite" \
    --marks "$work/snapshotdb-$sync/marks" --commits "$commits" --synchronous "$sync"
  python3 Tests/PowerLoss/replay.py "$work/snapshotdb-$sync.trace" --database "$work/snapshotdb-$sync/db.sqlite" \
    --kind snapshotdb --sync "$sync" --states "$states" --checker "$stress power-loss-check" \
    --label "snapshotdb $sync" || failed=1
  trace "sqlite-$sync" python3 Tests/PowerLoss/reference.py "$work/sqlite-$sync/db.sqlite" \
    "$work/sqlite-$sync/marks" "$commits" "$sync"
  python3 Tests/PowerLoss/replay.py "$work/sqlite-$sync.trace" --database "$work/sqlite-$sync/db.sqlite" \
    --kind sqlite --sync "$sync" --states "$states" --label "sqlite reference $sync" || failed=1
done
echo "negative control (syncs ignored; violations expected):"
python3 Tests/PowerLoss/replay.py "$work/snapshotdb-full.trace" --database "$work/snapshotdb-full/db.sqlite" \
  --kind snapshotdb --sync full --states "$states" --checker "$stress power-loss-check" --ignore-syncs \
  --label "negative control" || { echo "powerloss: the negative control found nothing: the checker is blind"; failed=1; }
if [ "$failed" -ne 0 ]; then echo "powerloss: FAIL"; exit 1; fi
echo "powerloss: PASS"
