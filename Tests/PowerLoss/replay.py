#!/usr/bin/env python3
"""Builds the states a power cut could leave from a trace (Tests/PowerLoss/trace.c) and checks each.

The model, as in ALICE and CrashMonkey: a file's writes and truncations are durable once a sync of
that file returned (those made before the sync began: the trace marks both ends); later ones persist
in any subset, each one whole, not at all, or torn at 512-byte sectors (any subset of its sectors).
Directory operations (create, link, rename, unlink) are durable once a sync of the directory
returned; later ones persist in order, up to any point (a prefix of them).

    replay.py TRACE --kind snapshotdb|sqlite --sync full|normal --states N --seed S
              --checker CMD  [--ignore-syncs]

Each state is written to a fresh directory and checked with the stock sqlite3 shell
(PRAGMA integrity_check), and with the library (`--checker`, `snapshotdb-stress power-loss-check`)
or Python's sqlite3 module. For SnapshotDB, an empty file or one that is not a database under the
database's name is a violation (it creates the file under a temporary name and links it into place
once synced); the plain SQLite reference creates the file in place, where a cut may leave either.
With `--sync full`, every commit acknowledged before the crash point must be in the state.
`--ignore-syncs` is the negative control: syncs are not honoured, so violations must be found.
Prints one summary line, `powerloss: K states, V violations`, and the first violations; exits 1
when there are violations (0 with --ignore-syncs only if there are some).
"""
import argparse, os, random, shutil, sqlite3, struct, subprocess, sys, tempfile

SECTOR = 512


def read_trace(path):
    data = open(path, 'rb').read()
    ops, i = [], 0
    while i < len(data):
        op = chr(data[i])
        (length,) = struct.unpack_from('<I', data, i + 1)
        name = data[i + 5:i + 5 + length].decode()
        offset, count = struct.unpack_from('<qq', data, i + 5 + length)
        i += 5 + length + 16
        payload = b''
        if op in 'WM':
            payload = data[i:i + count]
            i += count
        ops.append((op, name, offset, count, payload))
    return ops


class Syncs:
    """The syncs of one file (or of the directory) that began and have not returned: for each,
    how many pending operations there were when it began. Syncs of one file may overlap (the
    writer's and the checkpointer's); a trace does not say which returned, so a return makes
    durable only what was pending when the oldest outstanding sync began (never more than is
    certain)."""

    def __init__(self):
        self.began = []

    def begin(self, pending_count):
        self.began.append(pending_count)

    def end(self, pending_count):
        """How many of the pending operations a returned sync made durable."""
        count = self.began.pop(0) if self.began else pending_count
        self.began = [max(0, began - count) for began in self.began]
        return count


class File:
    def __init__(self):
        self.durable = bytearray()
        self.pending = []  # ('W', offset, bytes) or ('T', size)
        self.syncs = Syncs()

    def begin_sync(self):
        self.syncs.begin(len(self.pending))

    def sync(self):
        count = self.syncs.end(len(self.pending))
        self.durable = apply(self.durable, self.pending[:count], None)
        self.pending = self.pending[count:]


def apply_names(mapping, operations):
    """The directory after `operations` (create, link, rename, unlink), in order."""
    mapping = dict(mapping)
    for operation in operations:
        kind, name = operation[0], operation[1]
        if kind == 'create':
            mapping[name] = operation[2]
        elif kind in ('link', 'rename'):
            if name in mapping:
                mapping[operation[2]] = mapping[name]
                if kind == 'rename':
                    del mapping[name]
        elif kind == 'unlink':
            mapping.pop(name, None)
    return mapping


def apply(content, ops, random_source):
    content = bytearray(content)
    for op in ops:
        if op[0] == 'T':
            if random_source is None or random_source.random() < 0.5:
                del content[op[1]:]
            continue
        _, offset, data = op
        # A write that was not synced persists whole, not at all, or torn: any subset of its
        # sectors (each choice a third of the time).
        choice = 1 if random_source is None else random_source.randrange(3)
        if choice == 0:
            continue
        for start in range(0, len(data), SECTOR):
            if choice == 2 and random_source.random() < 0.5:
                continue
            chunk = data[start:start + SECTOR]
            at = offset + start
            if len(content) < at:
                content.extend(b'\0' * (at - len(content)))
            content[at:at + len(chunk)] = chunk
    return content


def build(ops, point, random_source, ignore_syncs, directory):
    # `names` is the directory as the process saw it; `durable_names` as of its last sync, with
    # the name operations made since in `name_ops`.
    names, durable_names, name_ops, acked, opened = {}, {}, [], 0, False
    directory_syncs = Syncs()

    def known(name):
        # A file first met by a write or a sync (opened before the trace began) was always there.
        if name not in names:
            names[name] = File()
            durable_names[name] = names[name]
        return names[name]

    index = 0
    while index <= point:
        op, name, offset, count, payload = ops[index]
        if op == 'M':
            for line in payload.decode().split('\n'):
                if line:
                    if line == 'opened':
                        opened = True
                    else:
                        acked = max(acked, int(line.split()[1]))
        elif op == 'C':
            if name not in names:
                names[name] = File()
                name_ops.append(('create', name, names[name]))
            elif offset == 1:
                names[name].pending.append(('T', 0))
        elif op in 'LR':
            if index + 1 < len(ops):
                target = ops[index + 1][1]
                operation = ('link' if op == 'L' else 'rename', name, target)
                names = apply_names(names, [operation])
                name_ops.append(operation)
                index += 1
        elif op == 'U':
            names.pop(name, None)
            name_ops.append(('unlink', name))
        elif op == 'W':
            known(name).pending.append(('W', offset, payload))
        elif op == 'T':
            known(name).pending.append(('T', offset))
        elif op == 'B' and not ignore_syncs:
            if name == directory:
                directory_syncs.begin(len(name_ops))
            elif name in names:
                names[name].begin_sync()
        elif op == 'S' and not ignore_syncs:
            if name == directory:
                count = directory_syncs.end(len(name_ops))
                durable_names = apply_names(durable_names, name_ops[:count])
                name_ops = name_ops[count:]
            elif name in names:
                names[name].sync()
        index += 1
    # The directory at the cut: its durable names and a prefix of the operations since.
    kept = random_source.randint(0, len(name_ops)) if random_source else len(name_ops)
    state = {}
    for name, file in apply_names(durable_names, name_ops[:kept]).items():
        state[name] = bytes(apply(file.durable, file.pending, random_source))
    return state, acked, opened


def write_state(state, directory):
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    for name, content in state.items():
        with open(os.path.join(directory, os.path.basename(name)), 'wb') as handle:
            handle.write(content)


def check(state, directory, database, kind, checker, acked, durable, opened):
    """The state's first problem, or None; and whether the library's own check (on its own copy,
    run even when the shell's check failed) found one."""
    # Two copies of the state: the sqlite3 shell's check, even read-only, must never be what the
    # library opens (a read-write shell recovers the WAL into the file and deletes it on close,
    # and the library would then never meet a torn WAL), and the library's open checkpoints.
    write_state(state, directory)
    library_directory = directory + '-library'
    write_state(state, library_directory)
    path = os.path.join(directory, os.path.basename(database))
    library_path = os.path.join(library_directory, os.path.basename(database))
    if not os.path.exists(path):
        # SnapshotDB syncs the directory before its open returns; plain SQLite syncs it only
        # with the first sync of a new journal or WAL (before its first commit returns).
        if kind == 'snapshotdb' and opened:
            return 'database missing after Database(path:) returned (its creation was not durable)', False
        if acked == 0 or not durable:
            return None, False
        return f'database missing after {acked} acknowledged commits', False
    # SnapshotDB creates a database under a temporary name, syncs it and links it into place, so
    # the name never holds an empty file or one that is not a database. Plain SQLite creates the
    # file in place: a cut before its first sync may leave either.
    if kind == 'snapshotdb' and os.path.getsize(path) == 0:
        return 'an empty file under the database name', False
    # Read-only for SnapshotDB's states (the shell must change nothing, see above); the plain
    # SQLite reference may leave a hot rollback journal (before it turned WAL on), which only a
    # read-write open rolls back, as SQLite would at its next open.
    readonly = ['-readonly'] if kind == 'snapshotdb' else []
    integrity = subprocess.run(['sqlite3'] + readonly + [path, 'PRAGMA integrity_check'], capture_output=True,
                               text=True)
    tolerated = kind == 'sqlite' and 'not a database' in integrity.stderr
    shell_problem = None
    if not tolerated and (integrity.returncode != 0 or integrity.stdout.strip() not in ('ok', '')):
        shell_problem = (f'integrity_check (exit {integrity.returncode}): {integrity.stdout.strip()[:200]} '
                         f'{integrity.stderr.strip()[:200]}')
    if kind == 'snapshotdb':
        result = subprocess.run(checker + ['--db', library_path], capture_output=True, text=True)
        line = (result.stdout.strip().splitlines() or ['bad no output: ' + result.stderr[-300:]])[-1]
        if not line.startswith('ok'):
            library_problem = f'library: {line[:300]}'
        elif durable and int(line.split()[1]) < acked:
            library_problem = f'{acked} commits acknowledged, {int(line.split()[1])} in the state'
        else:
            library_problem = None
        return shell_problem or library_problem, library_problem is not None
    if shell_problem:
        return shell_problem, False
    else:
        try:
            connection = sqlite3.connect(path)
            rows = connection.execute('SELECT n FROM t ORDER BY n').fetchall()
            connection.close()
        except sqlite3.OperationalError as error:
            if 'no such table' not in str(error):
                return f'python sqlite3: {error}', False
            rows = []  # the commit that created the table was lost (allowed unless durable)
        except sqlite3.DatabaseError as error:
            if acked == 0:
                return None, False
            return f'python sqlite3: {error}', False
        numbers = [row[0] for row in rows]
        if numbers != list(range(1, len(numbers) + 1)):
            return f'rows are not 1...{len(numbers)}', False
        commits = len(numbers)
    if durable and commits < acked:
        return f'{acked} commits acknowledged, {commits} in the state', False
    return None, False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('trace')
    parser.add_argument('--database', required=True)
    parser.add_argument('--kind', choices=['snapshotdb', 'sqlite'], required=True)
    parser.add_argument('--sync', choices=['full', 'normal'], required=True)
    parser.add_argument('--states', type=int, default=100)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--checker', default='')
    parser.add_argument('--ignore-syncs', action='store_true')
    parser.add_argument('--label', default='')
    arguments = parser.parse_args()
    ops = read_trace(arguments.trace)
    random_source = random.Random(arguments.seed)
    # Crash points: spread over the trace, plus every point right after a truncation or a new
    # WAL header (where ordering matters most).
    interesting = []
    for start, op in enumerate(ops):
        if op[0] == 'T' or (op[0] == 'W' and op[2] == 0):
            # Every point from there to the sync of that file (at most 40 ops): the window in
            # which a truncation and a new header may still be lost.
            for index in range(start, min(len(ops), start + 40)):
                interesting.append(index)
                if ops[index][0] == 'S' and ops[index][1] == op[1]:
                    break
    points = sorted(set(random_source.sample(range(len(ops)), min(len(ops), arguments.states)) + interesting))
    directory = tempfile.mkdtemp(prefix='powerloss-')
    violations = []
    # The states in which the library's check found a problem, and the most
    # commits any state had acknowledged: a control that finds only what the shell finds, or a
    # run whose states acknowledged nothing, shows nothing of the library or of durability.
    beyond_shell = 0
    most_acked = 0
    try:
        for point in points:
            state, acked, opened = build(ops, point, random_source, arguments.ignore_syncs,
                                         os.path.dirname(arguments.database))
            most_acked = max(most_acked, acked)
            problem, library_found = check(state, directory, arguments.database, arguments.kind,
                                           arguments.checker.split(), acked, arguments.sync == 'full', opened)
            if library_found:
                beyond_shell += 1
            if problem:
                violations.append(f'after op {point} ({ops[point][0]} {os.path.basename(ops[point][1])}): {problem}')
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(directory + '-library', ignore_errors=True)
    print(f'powerloss {arguments.label}: {len(points)} states, {len(violations)} violations '
          f'({beyond_shell} found by the library), up to {most_acked} commits acknowledged')
    for violation in violations[:5]:
        print('  ' + violation)
    if most_acked == 0:
        print('  no state had an acknowledged commit: the marks were not traced')
        sys.exit(1)
    if arguments.ignore_syncs:
        # Blind unless the library's own check found some (what the shell finds says nothing of it).
        sys.exit(0 if beyond_shell > 0 or arguments.kind == 'sqlite' else 1)
    sys.exit(1 if violations else 0)


if __name__ == '__main__':
    main()
