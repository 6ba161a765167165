/// A failure of the stress tool itself or of the data it reads back, with a message for people.
struct StressError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) { self.description = description }
}
