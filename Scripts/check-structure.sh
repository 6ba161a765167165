#!/usr/bin/env bash
# Structure checks (issue 43): the library's shape, held by CI rather than by review.
# Each rule lists its exceptions here, each with why it stands; a new violation fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
lib=Sources/SnapshotDB
failed=0

# report RULE LINES: prints the lines that break RULE, and fails the run when there are any.
report() {
  local rule="$1" lines="$2"
  if [ -n "$lines" ]; then
    echo "structure: FAILED: $rule" >&2
    printf '%s\n' "$lines" | sed 's/^/  /' >&2
    failed=1
  else
    echo "structure: ok: $rule"
  fi
}

# Code lines only: drop `//` comments (doc comments included), so that prose may name anything.
code() { grep -rnE "$1" "${@:2}" --include='*.swift' | grep -vE '^[^:]+:[0-9]+:\s*//'; }

# 1. One C funnel: only the SQLite layer imports SQLite's C module (the VFS target is C itself).
report "CSQLite is imported only in $lib/SQLite/" \
  "$(code '^(internal |public |package |@_implementationOnly )?import CSQLite' "$lib" | grep -v "^$lib/SQLite/")"

# 2. Extension kinds are ExtensionKind, never strings compared.
report "no string tests of extension kinds" \
  "$(code '(kind|Kind)\s*(==|!=)\s*"|"(view|index|search)"\s*(==|!=)|case "(view|index|search)"' "$lib")"

# 3. Views keep their types to themselves: the commit path and the other extensions ask the
#    definition protocol, never a view type.
report "no view type named outside $lib/Extensions/View/" \
  "$(code '\b(ViewDefinition|ViewCommitRecord|ViewWriter|ViewOrder|ViewRanking|ViewPages|ViewLayout)\b' "$lib" \
    | grep -v "^$lib/Extensions/View/")"

# 4. A read replica's decisions sit with the replica: other code asks the database's role
#    (`DatabaseRole`) what it needs to know, never whether it is a replica.
replicaFiles=(
  "$lib/Database/Database+Replica.swift"  # the replica's own file (its role, its open)
  "$lib/Database/Database.swift"          # stores the replica given at open, and makes the role from it
)
replicaLines=$(code '\breplica\s*(==|!=)\s*nil|\.replica\b' "$lib")
for file in "${replicaFiles[@]}"; do replicaLines=$(printf '%s\n' "$replicaLines" | grep -v "^$file:"); done
report "no replica check outside the replica's files (and the listed exceptions)" "$replicaLines"

# 4b. Who keeps the WAL (SnapshotDB, or a replicator such as Litestream) is a mode with its own
#     decisions (`Configuration.Checkpointing`): other code asks them, never whether a replicator
#     is there.
replicatorLines=$(code '\breplicator\s*(==|!=)\s*nil' "$lib" \
  | grep -v "^$lib/Checkpoint/Checkpointing+Decisions.swift:" \
  | grep -v "^$lib/Checkpoint/Checkpointer.swift:.*hasReplicator = Atomic(replicator != nil)")
report "no replicator check outside Checkpointing+Decisions.swift" "$replicatorLines"

# 5. Files by concern: none of the library's is over 500 lines. Exceptions, each to be split:
longFiles=()
maxLines=500
while IFS= read -r file; do
  lines=$(wc -l < "$file")
  [ "$lines" -le "$maxLines" ] && continue
  longFiles+=("$file: $lines lines")
done < <(find "$lib" -name '*.swift' | sort)
allowedLong=(
)
long=$(printf '%s\n' "${longFiles[@]}")
for file in "${allowedLong[@]}"; do long=$(printf '%s\n' "$long" | grep -v "^$file:"); done
report "no library file over $maxLines lines" "$(printf '%s\n' "$long" | sed '/^$/d')"

exit "$failed"
