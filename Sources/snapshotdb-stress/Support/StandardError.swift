internal import Foundation

/// Writes diagnostics to standard error, one line at a time.
enum StandardError {
    static func write(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
