#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Finds the holders of the `-shm` lock bytes without taking any lock.
enum LockProbe {
    /// `F_OFD_GETLK` from `<fcntl.h>`; the Glibc module does not export the OFD commands.
    private static let ofdGetLockCommand: Int32 = 36

    /// The lock table of the `-shm` at `path`; `nil` when the `-shm` does not exist.
    ///
    /// `.procLocks` only calls `stat()` on the `-shm` and reads `/proc/locks`; it never opens
    /// the `-shm`, so it is safe in a process whose SQLite connections hold locks there.
    static func probe(
        sharedMemoryPath path: String, method: LockProbeMethod, access: FileAccess
    ) throws(InspectionError) -> WALIndexLocks? {
        guard let status = try InspectedFile.status(of: path) else { return nil }
        var holders: [WALIndexLock: [LockHolder]] = [:]
        var sources: [LockHolder.Source] = []
        var names = ProcessNames()

        if let entries = procLocksEntries(for: status.identity) {
            sources.append(.procLocks)
            for entry in entries {
                for lock in WALIndexLock.allCases where entry.covers(Int64(lock.rawValue)) {
                    let holder = LockHolder(
                        pid: entry.pid, processName: entry.pid.flatMap { names.name(of: $0) },
                        mode: entry.mode,
                        kind: entry.kind, source: .procLocks)
                    if !holders[lock, default: []].contains(holder) {
                        holders[lock, default: []].append(holder)
                    }
                }
            }
        }

        if method == .procLocksAndOFDGetLock,
            let file = try InspectedFile.openReadOnly(path, access: access)
        {
            sources.append(.ofdGetLock)
            for lock in WALIndexLock.allCases {
                guard var found = ofdConflictingLock(descriptor: file.descriptor, offset: lock.rawValue)
                else {
                    continue
                }
                let known = holders[lock, default: []].contains {
                    $0.pid == found.pid && $0.mode == found.mode && $0.kind == found.kind
                }
                if !known {
                    found.processName = found.pid.flatMap { names.name(of: $0) }
                    holders[lock, default: []].append(found)
                }
            }
        }

        return WALIndexLocks(
            path: path, sources: sources,
            bytes: WALIndexLock.allCases.map { lock in
                LockByteState(lock: lock, holders: (holders[lock] ?? []).sorted(by: Self.holderOrder))
            })
    }

    private static func holderOrder(_ left: LockHolder, _ right: LockHolder) -> Bool {
        (left.pid ?? Int32.max, left.mode.rawValue) < (right.pid ?? Int32.max, right.mode.rawValue)
    }

    /// One lock line of `/proc/locks`.
    struct ProcLocksEntry: Equatable {
        var kind: LockHolder.Kind
        var mode: LockHolder.Mode
        var pid: Int32?
        var deviceMajor: UInt64
        var deviceMinor: UInt64
        var inode: UInt64
        var start: Int64
        var end: Int64

        func covers(_ offset: Int64) -> Bool { start <= offset && offset <= end }
    }

    /// The granted POSIX and OFD locks of `/proc/locks` on the file `identity`; `nil` if unreadable.
    static func procLocksEntries(for identity: FileIdentity) -> [ProcLocksEntry]? {
        guard let bytes = InspectedFile.contentsOfProcFile("/proc/locks") else { return nil }
        return parseProcLocks(String(decoding: bytes, as: UTF8.self)).filter {
            $0.deviceMajor == identity.deviceMajor && $0.deviceMinor == identity.deviceMinor
                && $0.inode == identity.inode
        }
    }

    /// Parses `/proc/locks` lines such as `1: POSIX  ADVISORY  READ 3801 fe:00:16220444 124 124`.
    ///
    /// Lines of blocked waiters (`1: -> POSIX ...`), `FLOCK` and lease lines are skipped: they
    /// are not record locks on the lock bytes. The device numbers are printed in hexadecimal.
    static func parseProcLocks(_ text: String) -> [ProcLocksEntry] {
        var entries: [ProcLocksEntry] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count >= 8, fields[1] != "->" else { continue }
            let kind: LockHolder.Kind
            switch fields[1] {
            case "POSIX": kind = .posix
            case "OFDLCK": kind = .openFileDescription
            default: continue
            }
            let mode: LockHolder.Mode
            switch fields[3] {
            case "READ": mode = .shared
            case "WRITE": mode = .exclusive
            default: continue
            }
            let file = fields[5].split(separator: ":")
            guard file.count == 3, let major = UInt64(file[0], radix: 16),
                let minor = UInt64(file[1], radix: 16),
                let inode = UInt64(file[2]), let start = Int64(fields[6])
            else { continue }
            let end = fields[7] == "EOF" ? Int64.max : Int64(fields[7])
            guard let end else { continue }
            let pid = Int32(fields[4]).flatMap { $0 > 0 ? $0 : nil }
            entries.append(
                ProcLocksEntry(
                    kind: kind, mode: mode, pid: pid, deviceMajor: major, deviceMinor: minor, inode: inode,
                    start: start, end: end))
        }
        return entries
    }

    /// The lock `F_OFD_GETLK` reports as conflicting with an exclusive lock on `offset`, if any.
    ///
    /// Any lock conflicts with an exclusive one, so a free byte answers `F_UNLCK`; only one of
    /// several shared holders is reported. The locks of the calling process are reported too,
    /// since an OFD lock's owner is the descriptor, not the process.
    private static func ofdConflictingLock(descriptor: Int32, offset: Int) -> LockHolder? {
        #if os(Linux)
            var query = flock()
            query.l_type = Int16(F_WRLCK)
            query.l_whence = Int16(SEEK_SET)
            query.l_start = off_t(offset)
            query.l_len = 1
            query.l_pid = 0
            guard fcntl(descriptor, ofdGetLockCommand, &query) == 0, query.l_type != Int16(F_UNLCK) else {
                return nil
            }
            return LockHolder(
                pid: query.l_pid > 0 ? query.l_pid : nil, processName: nil,
                mode: query.l_type == Int16(F_RDLCK) ? .shared : .exclusive,
                kind: query.l_pid == -1 ? .openFileDescription : .posix, source: .ofdGetLock)
        #else
            return nil
        #endif
    }
}

/// Process names from `/proc/PID/comm`, read once per process id.
struct ProcessNames {
    private var cache: [Int32: String?] = [:]

    mutating func name(of pid: Int32) -> String? {
        if let cached = cache[pid] { return cached }
        let name = InspectedFile.contentsOfProcFile("/proc/\(pid)/comm").map {
            String(decoding: $0, as: UTF8.self).trimmingTrailingNewlines()
        }
        cache[pid] = .some(name)
        return name
    }
}

extension String {
    fileprivate func trimmingTrailingNewlines() -> String {
        var result = self
        while result.last == "\n" || result.last == "\r" { result.removeLast() }
        return result
    }
}
