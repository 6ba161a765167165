/// User input quoted in an error message, cut short: a message must not grow with its input
/// (a 100 KB query once made a 100 KB message, in every log line that printed it).
enum QuotedInput {
    /// The characters of input a message quotes at most.
    static let limit = 120

    /// `text` as a Swift string literal (`debugDescription`), its first ``limit`` characters
    /// only, followed by how long it was when it was cut.
    static func quote(_ text: String) -> String {
        guard text.count > limit else { return text.debugDescription }
        return String(text.prefix(limit)).debugDescription + "… (\(text.utf8.count) bytes)"
    }
}
