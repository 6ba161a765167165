import Foundation
import Testing

@testable import SnapshotDB

/// A sort key's byte order is Swift's order of its components, for every component type, and
/// `.descending` reverses it.
@Suite("Sort keys")
struct SortKeyTests {
    /// Checks, for every pair of `values`, that the keys compare as the values do (`<` and `==`),
    /// and that descending keys compare the other way.
    static func checkOrder<T: SortKeyComponent & Comparable>(
        _ values: [T], name: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let keys = values.map { SortKey($0) }
        let descending = values.map { SortKey(.descending($0)) }
        var failures = 0
        for i in values.indices {
            for j in values.indices where failures < 5 {
                let (a, b) = (values[i], values[j])
                let ok =
                    (keys[i] < keys[j]) == (a < b) && (keys[i] == keys[j]) == (a == b)
                    && (descending[i] < descending[j]) == (b < a)
                if !ok {
                    failures += 1
                    Issue.record(
                        "\(name): \(String(reflecting: a)) vs \(String(reflecting: b)): keys \(keys[i]) \(keys[j])",
                        sourceLocation: sourceLocation)
                }
            }
        }
    }

    @Test func stringsCompareAsSwiftCompares() {
        var random = SeededGenerator(state: 7)
        // ASCII, NUL, Latin, combining marks (canonically equivalent pairs), CJK, emoji, and
        // scalars past the Basic Multilingual Plane.
        let pieces = [
            "", "a", "b", "A", "z", "\u{0}", "\u{1}", "\u{7F}", "é", "e\u{301}", "e", "\u{301}", "ß", "ss",
            "Å",
            "A\u{30A}", "\u{212B}", "日本", "語", "😀", "👍🏽", "\u{10FFFF}", "\u{FFFF}", "ﬁ", " ", "~",
        ]
        var values = pieces
        for _ in 0..<300 {
            let length = Int.random(in: 0...4, using: &random)
            values.append((0..<length).map { _ in pieces.randomElement(using: &random)! }.joined())
        }
        // Swift's `<` is not a strict order on every pair here: "A\u{30A}" < "Åa", "Åa" < "A\u{30A}"
        // and "A\u{30A}" == "Åa" are all false (Swift 6.3's stdlib). Where it answers one way,
        // the key must agree; everywhere, the key follows canonical order, which `<` documents:
        // the strings' normalization form C, compared scalar by scalar.
        func canonical(_ text: String) -> [UInt32] {
            text.precomposedStringWithCanonicalMapping.unicodeScalars.map(\.value)
        }
        var inconsistent = 0
        for a in values {
            for b in values {
                let key = SortKey(a) < SortKey(b)
                let answers = [a < b, b < a, a == b].filter { $0 }.count
                if answers == 1 {
                    #expect(key == (a < b), "\(a.debugDescription) < \(b.debugDescription)")
                } else {
                    inconsistent += 1
                }
                #expect(key == canonical(a).lexicographicallyPrecedes(canonical(b)))
                #expect((SortKey(a) == SortKey(b)) == (canonical(a) == canonical(b)))
                #expect((SortKey(.descending(a)) < SortKey(.descending(b))) == (SortKey(b) < SortKey(a)))
            }
        }
        #expect(inconsistent < values.count * values.count / 20)
        #expect(SortKey("é") == SortKey("e\u{301}"), "canonically equivalent strings give one key")
        #expect(SortKey("a") < SortKey("a\u{0}") && SortKey("a\u{0}") < SortKey("ab"))
    }

    @Test func integersDoublesDatesAndBoolsCompareNumerically() {
        var random = SeededGenerator(state: 11)
        var integers = [Int.min, Int.min + 1, -1, 0, 1, Int.max - 1, Int.max, 255, 256, -256]
        for _ in 0..<300 { integers.append(Int.random(in: Int.min...Int.max, using: &random)) }
        for _ in 0..<100 { integers.append(Int.random(in: -1000...1000, using: &random)) }
        Self.checkOrder(integers, name: "Int")

        var doubles: [Double] = [
            -.infinity, -.greatestFiniteMagnitude, -1, -.leastNonzeroMagnitude, -0.0, 0,
            .leastNonzeroMagnitude,
            .leastNormalMagnitude, 1, 1.5, .greatestFiniteMagnitude, .infinity,
        ]
        for _ in 0..<300 {
            doubles.append(Double(bitPattern: UInt64.random(in: 0...UInt64.max, using: &random)))
        }
        doubles.removeAll { $0.isNaN }
        Self.checkOrder(doubles, name: "Double")
        // NaN has no place in Swift's `<`: the key puts every NaN after +infinity, as one value.
        #expect(SortKey(Double.infinity) < SortKey(Double.nan))
        #expect(
            SortKey(Double.nan) == SortKey(-Double.nan) && SortKey(Double.nan) == SortKey(Double.signalingNaN)
        )
        #expect(SortKey(-0.0) == SortKey(0.0))

        let dates = doubles.filter { abs($0) < 1e15 }.map { Date(timeIntervalSinceReferenceDate: $0) }
        Self.checkOrder(dates, name: "Date")
        #expect(SortKey(false) < SortKey(true) && SortKey(.descending(true)) < SortKey(.descending(false)))
    }

    /// A keyed view's build orders its items by eight key bytes at a time (see
    /// `ViewWriter.keyedOrder`): the same order as comparing whole keys and then items, for
    /// keys that share prefixes of every length across the eight-byte steps, keys that are
    /// prefixes of others, trailing NULs (which the zero padding must not confuse with a
    /// shorter key), empty keys and equal keys of different items.
    @Test func aBuildOrdersKeysAsWholeKeysCompare() {
        var random = SeededGenerator(state: 29)
        let stems: [[UInt8]] = [
            [], [0], [0, 0], Array("inbox".utf8), Array("inbox\u{0}".utf8), Array("abcdefgh".utf8),
            Array("abcdefgh".utf8) + [0], Array("abcdefghabcdefgh".utf8), Array(repeating: 0xFF, count: 9),
        ]
        // Keys that agree on thousands of bytes (a view sorted by a note's body), some equal
        // whole: past the depth the build sorts eight bytes at a time, whole keys decide.
        let long = (0..<5_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        for round in 0..<24 {
            let count = [0, 1, 2, 7, 300, 40][round % 6]
            var keys: [[UInt8]] = []
            var items: [ViewItem] = []
            for index in 0..<count {
                var key = round % 6 == 5 ? long : []
                key += stems.randomElement(using: &random)!
                for _ in 0..<Int.random(in: 0...2, using: &random) {
                    key += stems.randomElement(using: &random)!
                }
                if Bool.random(using: &random) {
                    key += (0..<Int.random(in: 0...10, using: &random)).map { _ in
                        [0, 1, 0x61, 0xFE, 0xFF].randomElement(using: &random)!
                    }
                }
                keys.append(key)
                items.append(
                    ViewItem(
                        collection: "c\(index % 3)", key: "k\(Int.random(in: 0..<count, using: &random))"))
            }
            let expected = keys.indices.sorted { SortKey.less(keys[$0], items[$0], keys[$1], items[$1]) }
            let order = ViewWriter<Int>.keyedOrder(keys, items)
            let sorted = { (positions: [Int]) in positions.map { (keys[$0], items[$0]) } }
            #expect(sorted(order).elementsEqual(sorted(expected)) { $0 == $1 }, "round \(round)")
            #expect(order.sorted() == Array(keys.indices), "round \(round): every item once")
        }
    }

    @Test func optionalsPutNilFirstAndCompoundKeysCompareInOrder() {
        var random = SeededGenerator(state: 13)
        let optionals: [Int?] = [nil, Int.min, -1, 0, 1, Int.max]
        for a in optionals {
            for b in optionals {
                let expected: Bool =
                    switch (a, b) {
                    case (nil, nil): false
                    case (nil, _): true
                    case (_, nil): false
                    case (let x?, let y?): x < y
                    }
                #expect(
                    (SortKey(a) < SortKey(b)) == expected,
                    "\(String(describing: a)) < \(String(describing: b))")
                #expect((SortKey(.descending(a)) < SortKey(.descending(b))) == (SortKey(b) < SortKey(a)))
            }
        }
        // (folder, modified descending, title): lexicographic over the tuple, whatever the
        // lengths of the strings in front.
        struct Row {
            var folder: String
            var modified: Date
            var title: String?
        }
        let folders = ["", "a", "ab", "b", "a\u{0}"]
        let titles: [String?] = [nil, "", "x", "xy", "y"]
        let rows = (0..<200).map { _ in
            Row(
                folder: folders.randomElement(using: &random)!,
                modified: Date(
                    timeIntervalSinceReferenceDate: Double(Int.random(in: -3...3, using: &random))),
                title: titles.randomElement(using: &random)!)
        }
        func swiftOrder(_ x: Row, _ y: Row) -> Bool {
            if x.folder != y.folder { return x.folder < y.folder }
            if x.modified != y.modified { return x.modified > y.modified }
            switch (x.title, y.title) {
            case (nil, nil): return false
            case (nil, _): return true
            case (_, nil): return false
            case (let a?, let b?): return a < b
            }
        }
        for x in rows {
            for y in rows {
                let keyX = SortKey(x.folder, .descending(x.modified), x.title)
                let keyY = SortKey(y.folder, .descending(y.modified), y.title)
                if (keyX < keyY) != swiftOrder(x, y) {
                    Issue.record("\(x) vs \(y)")
                    return
                }
            }
        }
    }
}
