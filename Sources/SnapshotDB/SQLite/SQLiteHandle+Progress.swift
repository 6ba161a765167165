internal import CSQLite

/// What SQLite's progress handler asks, every ``checkInterval`` virtual-machine steps, while a
/// statement runs: whether to stop it (it then fails with `SQLITE_INTERRUPT`).
protocol SQLiteProgressCheck: AnyObject {
    /// Virtual-machine steps between two questions.
    static var checkInterval: Int32 { get }
    /// Whether SQLite must stop the running statement.
    func shouldStop() -> Bool
}

extension SQLiteHandle {
    /// Runs `body` with `check` asked by SQLite's progress handler (`sqlite3_progress_handler`);
    /// with `nil`, runs it as it is (no handler, no cost).
    func checking<T>(_ check: (any SQLiteProgressCheck)?, _ body: () throws -> T) rethrows -> T {
        guard let check else { return try body() }
        // (A C function pointer captures nothing: the check travels as the handler's context.)
        let box = ProgressCheckBox(check)
        sqlite3_progress_handler(
            pointer, type(of: check).checkInterval,
            { context in
                guard let context else { return 0 }
                return Unmanaged<ProgressCheckBox>.fromOpaque(context).takeUnretainedValue().check
                    .shouldStop()
                    ? 1 : 0
            }, Unmanaged.passUnretained(box).toOpaque())
        defer { sqlite3_progress_handler(pointer, 0, nil, nil) }
        return try withExtendedLifetime(box) { try body() }
    }
}

/// The progress handler's context: the check, in a class SQLite's C callback can hold.
private final class ProgressCheckBox {
    let check: any SQLiteProgressCheck
    init(_ check: any SQLiteProgressCheck) { self.check = check }
}
