/// Whether two strings are the same UTF-8 bytes: the identity of a key or collection name in
/// the database, where SQLite compares bytes.
///
/// Swift's `==` on `String` is canonical equivalence: `"é"` (U+00E9) and `"e\u{301}"` (`e` and a
/// combining acute accent) are equal in Swift and two different keys in SQLite. Code that keys
/// rows in memory (the value cache, a view's items) compares with this instead.
func sameUTF8(_ lhs: String, _ rhs: String) -> Bool {
    compareUTF8(lhs, rhs) == 0
}

/// `memcmp` order of the UTF-8 bytes of two strings (a shorter prefix first): negative, zero or
/// positive. For strings in Unicode's NFC form this is also Swift's `<`.
func compareUTF8(_ lhs: String, _ rhs: String) -> Int {
    var lhs = lhs
    var rhs = rhs
    return lhs.withUTF8 { left in
        rhs.withUTF8 { right in SortKey.compare(UnsafeRawBufferPointer(left), UnsafeRawBufferPointer(right)) }
    }
}
