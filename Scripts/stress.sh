#!/usr/bin/env bash
# Builds the stress tool (release) and runs it, passing every argument through, e.g.
#   Scripts/stress.sh --duration 20 --writers 3 --readers 3 --json
# Exits 0 only when every invariant held. Build output goes to standard error, so that the
# report (text or --json) is all that standard output carries.
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product snapshotdb-stress >&2
bin="$(swift build -c release --show-bin-path)"
exec "$bin/snapshotdb-stress" "$@"
