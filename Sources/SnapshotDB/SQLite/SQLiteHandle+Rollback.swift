internal import Logging

extension SQLiteHandle {
    /// Ends the open transaction, if any, where something else decides what the caller reports
    /// (an error it goes on to throw, or a read or a check that is over): a `ROLLBACK` that
    /// fails is logged as an error on `logger`, naming `reason`, instead of being dropped. The
    /// handle is then ``isBroken``.
    ///
    /// `reason` and `logger` are only evaluated when the `ROLLBACK` fails.
    func rollback(after reason: @autoclosure () -> String, logger: @autoclosure () -> Logger) {
        do {
            try rollback()
        } catch {
            logger().error("ROLLBACK after \(reason()) failed: \(error)")
        }
    }
}
