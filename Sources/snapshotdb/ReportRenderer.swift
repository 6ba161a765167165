import SnapshotDBInspection

/// The text report of `inspect` and `watch`: one labelled line per fact, readable in seconds.
struct ReportRenderer {
    var report: InspectionReport
    var health: Health

    private static let labelWidth = 12

    func render() -> String {
        var lines: [String] = [report.database.path]
        databaseLines(into: &lines)
        walLines(into: &lines)
        lockLines(into: &lines)
        readerLines(into: &lines)
        resetLines(into: &lines)
        for warning in health.warnings {
            lines.append("WARNING: \(warning.message)")
        }
        if let frames = report.frames {
            lines.append("")
            lines.append(contentsOf: frameTable(frames))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    private func line(_ label: String, _ text: String) -> String {
        label.padded(to: Self.labelWidth) + text
    }

    private func continuation(_ text: String) -> String {
        "".padded(to: Self.labelWidth) + text
    }

    private func databaseLines(into lines: inout [String]) {
        let database = report.database
        let header = database.header
        var facts = [
            "\(Format.bytes(database.sizeBytes)) on disk",
            "\(Format.plural(header.pageCount, "page")) of \(Format.count(header.pageSize)) bytes committed",
            header.isWALMode ? "WAL mode" : "rollback-journal mode",
        ]
        if header.isSnapshotDB {
            facts.append("SnapshotDB schema \(header.userVersion)")
        } else {
            facts.append("application_id \(Format.hex(header.applicationID)) (not SnapshotDB)")
            facts.append("user_version \(header.userVersion)")
        }
        lines.append(line("database", facts.joined(separator: ", ")))
        let snapshotDB = report.snapshotDB
        if let counter = snapshotDB.commitCounter {
            lines.append(line("commit", Format.count(counter)))
        } else if snapshotDB.isSnapshotDB {
            lines.append(
                line("commit", "unavailable: \(snapshotDB.commitCounterUnavailableReason ?? "unknown")"))
        }
        if let history = snapshotDB.history {
            lines.append(
                line(
                    "history",
                    "\(Format.count(UInt64(history.rows))) rows, \(Format.bytes(Int64(history.bytes))), "
                        + "changesets after commit \(Format.count(history.oldestCommit))"))
            for consumer in history.consumers {
                lines.append(
                    line(
                        "consumer",
                        "'\(consumer.name)' at commit \(Format.count(consumer.position)), "
                            + "\(Format.count(consumer.commitsBehind)) behind"
                            + (consumer.isExpired ? ", expired" : "")))
            }
        }
    }

    private func walLines(into lines: inout [String]) {
        guard let wal = report.wal else {
            lines.append(line("wal", "none (no -wal file)"))
            lines.append(line("checkpoint", "nothing to checkpoint"))
            walIndexLine(into: &lines)
            return
        }
        if wal.header == nil {
            lines.append(line("wal", "empty (0 bytes)"))
        } else if wal.header?.isValid == false {
            lines.append(
                line(
                    "wal",
                    "\(Format.bytes(wal.sizeBytes)) with an invalid header (SQLite ignores it): "
                        + Format.plural(wal.staleFrames, "stale frame")))
        } else {
            var facts = [
                "\(Format.bytes(wal.sizeBytes))", "\(Format.plural(wal.validFrames, "valid frame"))",
                "\(Format.plural(wal.commitFrames, "commit"))", "last commit frame \(wal.lastCommitFrame)",
            ]
            if wal.uncommittedFrames > 0 {
                facts.append("\(Format.count(wal.uncommittedFrames)) uncommitted")
            }
            if wal.staleFrames > 0 {
                var kinds = ["\(Format.count(wal.staleFramesWithOtherSalts)) with older salts"]
                if wal.zeroFilledFrames > 0 {
                    kinds.append("\(Format.count(wal.zeroFilledFrames)) zero-filled, preallocated")
                }
                facts.append(
                    "stale tail of \(Format.plural(wal.staleFrames, "frame")) (\(kinds.joined(separator: ", ")))"
                )
            }
            if wal.trailingPartialBytes > 0 {
                facts.append("\(Format.count(wal.trailingPartialBytes)) trailing bytes")
            }
            lines.append(line("wal", facts.joined(separator: ", ")))
        }
        lines.append(
            line(
                "checkpoint",
                [
                    "\(Format.count(report.committedFrames)) committed frames",
                    "\(Format.count(report.checkpointedFrames)) checkpointed",
                    "\(Format.count(report.framesToCheckpoint)) to checkpoint",
                ].joined(separator: ", ")))
        walIndexLine(into: &lines)
    }

    private func walIndexLine(into lines: inout [String]) {
        guard let index = report.walIndex else {
            lines.append(
                line(
                    "wal-index",
                    "none (no -shm file, or shorter than its header: no process has the database open, "
                        + "or one is opening it)"))
            return
        }
        let marks = index.readMarks.map { $0.map { String($0) } ?? "-" }.joined(separator: ", ")
        var facts = [
            "mxFrame \(index.header.maxFrame)", "nBackfill \(index.backfilledFrames)",
            "nBackfillAttempted \(index.backfillAttemptedFrames)", "read marks [\(marks)]",
        ]
        if index.isReliable {
            facts.append("header copies agree, checksum ok")
        } else if !index.copiesAgree {
            facts.append("TORN: header copies differed in \(index.readAttempts) reads")
        } else if !index.header.isInitialized {
            facts.append("NOT INITIALIZED")
        } else {
            facts.append("HEADER CHECKSUM MISMATCH")
        }
        if index.saltsMatchWAL == false {
            facts.append("salts differ from the -wal's (reset, not yet rewritten)")
        }
        lines.append(line("wal-index", facts.joined(separator: ", ")))
    }

    private func lockLines(into lines: inout [String]) {
        guard let locks = report.locks else { return }
        if locks.sources.isEmpty {
            lines.append(line("locks", "unknown (/proc/locks is not readable)"))
            return
        }
        let connected = locks.connectedProcesses
        lines.append(line("processes", connected.isEmpty ? "none" : names(connected)))
        let writers = locks.holders(of: .write)
        lines.append(line("writer", writers.isEmpty ? "none" : "write lock held by \(names(writers))"))
        for lock in [WALIndexLock.checkpoint, .recover] {
            let holders = locks.holders(of: lock)
            if !holders.isEmpty { lines.append(line(lock.description, "held by \(names(holders))")) }
        }
    }

    private func readerLines(into lines: inout [String]) {
        guard !report.readSlots.isEmpty else { return }
        var first = true
        var free: [String] = []
        for slot in report.readSlots {
            guard slot.isHeld else {
                free.append(String(slot.slot))
                continue
            }
            let text = describe(slot)
            lines.append(first ? line("readers", text) : continuation(text))
            first = false
        }
        let freeText =
            free.isEmpty ? nil : "\(free.count == 1 ? "slot" : "slots") \(free.joined(separator: ", ")): free"
        if let freeText {
            lines.append(first ? line("readers", "none (" + freeText + ")") : continuation(freeText))
        }
    }

    private func describe(_ slot: ReadSlot) -> String {
        let mark = slot.readMark.map { " (mark \($0))" } ?? ""
        var text = "slot \(slot.slot)\(mark): \(names(slot.holders))"
        guard let pin = slot.pin else { return text + " (exclusive: updating the mark)" }
        if pin.readsDatabaseFileOnly {
            text += " reads the database file only and blocks all backfill"
        }
        let frames = Format.plural(pin.framesBehind, "frame")
        let commits = Format.plural(pin.commitFramesBehind, "commit")
        // Frames are counted from the slot's read mark, which may be older than the reader's
        // snapshot (SQLite lets a reader use a slot whose mark is at or before its snapshot), so
        // they are what the mark pins, and "behind" is kept for the commit counter alone.
        text += "; pins \(frames) (\(commits), \(Format.shortBytes(pin.bytesBehind))) after its mark"
        if let commit = pin.snapshotCommit {
            text += "; sees commit \(Format.count(commit))"
            if let behind = pin.commitsBehind { text += " (\(Format.count(behind)) behind)" }
        }
        return text
    }

    private func resetLines(into lines: inout [String]) {
        let reset = report.walReset
        if reset.isPossible {
            let copies = Format.plural(reset.framesToCheckpoint, "frame")
            let detail =
                !reset.isNeeded
                ? "nothing to reset"
                : reset.framesToCheckpoint > 0
                    ? "a TRUNCATE checkpoint would copy \(copies) first"
                    : "a TRUNCATE checkpoint would reset it now"
            lines.append(line("WAL reset", "possible (\(detail))"))
            return
        }
        lines.append(line("WAL reset", "not possible:"))
        for blocker in reset.blockers {
            lines.append(continuation("- " + blocker.message))
        }
    }

    private func frameTable(_ frames: [WALFrame]) -> [String] {
        var rows = ["frames (index, page, commit size, status, checkpointed, salts)"]
        let salts = report.wal?.header.map { ($0.salt1, $0.salt2) }
        for frame in frames {
            let commit = frame.commitPageCount.map { String($0) } ?? "-"
            let saltNote = salts.map { $0 == (frame.salt1, frame.salt2) ? "current" : "other" } ?? "-"
            rows.append(
                [
                    String(frame.index).leftPadded(to: 8), String(frame.pageNumber).leftPadded(to: 8),
                    commit.leftPadded(to: 8), frame.status.rawValue.padded(to: 12),
                    (frame.isCheckpointed ? "yes" : "no").padded(to: 4), saltNote,
                ].joined(separator: "  "))
        }
        let zeroFilled = report.zeroFilledFrameRanges ?? []
        if frames.isEmpty && zeroFilled.isEmpty { rows.append("  (none)") }
        for range in zeroFilled {
            let span = range.count == 1 ? "\(range.first)" : "\(range.first)-\(range.last)"
            rows.append(
                "  \(span): \(Format.plural(range.count, "zero-filled stale frame")) (not listed one by one)")
        }
        return rows
    }

    private func names(_ holders: [LockHolder]) -> String {
        holders.map { holder in
            holder.mode == .exclusive ? "\(holder.displayName) [exclusive]" : holder.displayName
        }.joined(separator: ", ")
    }
}

extension String {
    fileprivate func padded(to length: Int) -> String {
        count >= length ? self + " " : self + String(repeating: " ", count: length - count)
    }

    fileprivate func leftPadded(to length: Int) -> String {
        count >= length ? self : String(repeating: " ", count: length - count) + self
    }
}
