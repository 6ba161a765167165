import Foundation
import SnapshotDBLocking
import Testing

@testable import SnapshotDB

/// The default codec's own JSON decoder gives exactly what Foundation's `JSONDecoder` gives, or
/// hands the value to it: random records round-trip through both, and hand-written documents
/// (foreign writers, damage) give the same value or the same error.
@Suite("Fast JSON decoding")
struct FastJSONTests {
    enum Kind: String, Codable, Equatable { case small, large }

    enum Shape: Codable, Equatable {
        case circle(radius: Double)
        case box(width: Int, height: Int)
        case none
    }

    struct Inner: Codable, Equatable {
        var name: String
        var tags: [String]
        var weight: Double?
    }

    struct Record: Codable, Equatable {
        var title: String
        var count: Int
        var small: Int8
        var medium: Int32
        var big: Int64
        var unsigned: UInt64
        var byte: UInt8
        var ratio: Double
        var flag: Bool
        var note: String?
        var score: Int?
        var date: Date
        var kind: Kind
        var shape: Shape
        var numbers: [Int]
        var matrix: [[Double]]
        var table: [String: Int]
        var inner: Inner
        var inners: [Inner]
        var maybeInner: Inner?
        var optionals: [String?]
    }

    static func string(_ random: inout SeededGenerator) -> String {
        let pieces = [
            "", "a", "Zebra", "é", "e\u{301}", "日本語", "😀", "\"quoted\"", "back\\slash", "new\nline",
            "tab\t", "\u{0}", "\u{1F}", "/", "</script>", "\u{7F}", "\u{FFFF}", "𝄞",
        ]
        return (0..<Int.random(in: 0...3, using: &random)).map { _ in pieces.randomElement(using: &random)! }
            .joined()
    }

    static func double(_ random: inout SeededGenerator) -> Double {
        switch Int.random(in: 0..<6, using: &random) {
        case 0:
            return [
                0, -0.0, 1, -1, 0.1, 1e-300, Double.leastNonzeroMagnitude, Double.greatestFiniteMagnitude,
                123456.789,
            ].randomElement(
                using: &random)!
        case 1: return Double(Int.random(in: -1_000_000...1_000_000, using: &random))
        default:
            // Any finite bit pattern.
            while true {
                let value = Double(bitPattern: random.next())
                if value.isFinite { return value }
            }
        }
    }

    static func inner(_ random: inout SeededGenerator) -> Inner {
        Inner(
            name: string(&random),
            tags: (0..<Int.random(in: 0...3, using: &random)).map { _ in string(&random) },
            weight: Bool.random(using: &random) ? double(&random) : nil)
    }

    static func record(_ random: inout SeededGenerator) -> Record {
        Record(
            title: string(&random), count: Int.random(in: Int.min...Int.max, using: &random),
            small: Int8.random(in: .min ... .max, using: &random),
            medium: Int32.random(in: .min ... .max, using: &random),
            big: [Int64.min, Int64.max, 0, Int64.random(in: .min ... .max, using: &random)].randomElement(
                using: &random)!,
            unsigned: [UInt64.max, 0, UInt64.random(in: .min ... .max, using: &random)].randomElement(
                using: &random)!,
            byte: UInt8.random(in: .min ... .max, using: &random), ratio: double(&random),
            flag: Bool.random(using: &random), note: Bool.random(using: &random) ? string(&random) : nil,
            score: Bool.random(using: &random) ? Int.random(in: -5...5, using: &random) : nil,
            date: Date(timeIntervalSinceReferenceDate: double(&random).truncatingRemainder(dividingBy: 1e12)),
            kind: Bool.random(using: &random) ? .small : .large,
            shape: [
                Shape.circle(radius: double(&random)),
                .box(width: Int.random(in: -9...9, using: &random), height: 3), .none,
            ].randomElement(using: &random)!,
            numbers: (0..<Int.random(in: 0...5, using: &random)).map { _ in
                Int.random(in: -99...99, using: &random)
            },
            matrix: [[double(&random)], [], [1, 2.5]],
            table: Dictionary(
                uniqueKeysWithValues: (0..<Int.random(in: 0...4, using: &random)).map { index in
                    ("k\(index)\(string(&random))", index)
                }),
            inner: inner(&random),
            inners: (0..<Int.random(in: 0...3, using: &random)).map { _ in inner(&random) },
            maybeInner: Bool.random(using: &random) ? inner(&random) : nil,
            optionals: [nil, string(&random), nil])
    }

    /// Random records, encoded as the codec encodes them: the fast decoder decodes every one
    /// itself (no fallback) and gives Foundation's value.
    @Test(arguments: [1, 2, 3]) func recordsDecodeAsFoundationDecodesThem(seed: UInt64) throws {
        var random = SeededGenerator(state: seed)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        for index in 0..<500 {
            let record = Self.record(&random)
            let data = try encoder.encode(record)
            let foundation = try JSONDecoder().decode(Record.self, from: data)
            let fast = try #require(
                FastJSON.decode(Record.self, from: data),
                "record \(index) fell back: \(String(decoding: data, as: UTF8.self))")
            #expect(fast == foundation, "record \(index): \(String(decoding: data, as: UTF8.self))")
            // `Double`s and dates round-trip bit for bit.
            #expect(fast.ratio.bitPattern == foundation.ratio.bitPattern)
            #expect(fast.date == record.date)
        }
    }

    struct WithFloat: Codable, Equatable {
        var x: Float
    }

    struct WithData: Codable, Equatable {
        var blob: Data
        var link: URL
        var amount: Decimal
    }

    /// Numbers as people and encoders write them, in and around the range that is parsed
    /// without `strtod` (at most 2^53 as digits, a decimal exponent within ±22): each gives
    /// Foundation's `Double`, bit for bit, and one written with an exponent or a fraction at the
    /// edges of that range too.
    @Test(arguments: [4, 5]) func decimalNumbersParseAsFoundationParsesThem(seed: UInt64) throws {
        var random = SeededGenerator(state: seed)
        var texts: [String] = [
            "9007199254740992", "9007199254740993", "9007199254740991.5", "1e22", "1e23", "1e-22", "1e-23",
            "123456789012345678", "1234567890123456789", "12345678901234567890", "0.1", "-0.25", "1E3",
            "1e+3", "2.5e-3", "4.35", "0.000001", "-123.456e5", "100e-2", "3.0000000000000004",
        ]
        for _ in 0..<4_000 {
            let digits = Int.random(in: 1...19, using: &random)
            var text = Bool.random(using: &random) ? "-" : ""
            let mantissa = (0..<digits).map { index in
                String(Int.random(in: (index == 0 ? 1 : 0)...9, using: &random))
            }.joined()
            let point = Int.random(in: 0...digits, using: &random)
            if point == 0 || point == digits {
                text += mantissa
            } else {
                text += mantissa.prefix(point) + "." + mantissa.dropFirst(point)
            }
            if Bool.random(using: &random) {
                text +=
                    (Bool.random(using: &random) ? "e" : "E") + ["", "+", "-"].randomElement(using: &random)!
                text += String(Int.random(in: 0...30, using: &random))
            }
            texts.append(text)
        }
        let json = Data(("[" + texts.joined(separator: ",") + "]").utf8)
        let theirs = try JSONDecoder().decode([Double].self, from: json)
        let ours = try #require(FastJSON.decode([Double].self, from: json))
        #expect(theirs.count == texts.count)
        for (index, text) in texts.enumerated() {
            #expect(ours[index].bitPattern == theirs[index].bitPattern, "\(text)")
        }
    }

    /// Types `JSONDecoder` decodes its own way go to it, and the codec's answer is its answer.
    @Test func floatsDataURLsAndDecimalsGoToFoundation() throws {
        let codec = JSONValueCodec()
        let float = try codec.encode(WithFloat(x: 0.1))
        #expect(FastJSON.decode(WithFloat.self, from: float) == nil)
        #expect(try codec.decode(WithFloat.self, from: float) == WithFloat(x: 0.1))
        let value = WithData(
            blob: Data([0, 1, 2, 255]), link: URL(string: "https://example.com/a?b=c")!, amount: 12.5)
        let data = try codec.encode(value)
        #expect(FastJSON.decode(WithData.self, from: data) == nil)
        #expect(try codec.decode(WithData.self, from: data) == value)
        #expect(FastJSON.decode(Data.self, from: try codec.encode(Data([1]))) == nil)
    }

    struct Lenient: Decodable, Equatable {
        var n: Int
        var source: String

        enum CodingKeys: String, CodingKey { case n }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            if let n = try? container.decode(Int.self, forKey: .n) {
                (self.n, source) = (n, "int")
            } else if let n = try? container.decode(Double.self, forKey: .n) {
                (self.n, source) = (Int(n.rounded()), "double")
            } else {
                (self.n, source) = (-1, "none")
            }
        }
    }

    enum Color: String, Codable, Equatable { case red, blue }

    /// Skips one element of an unkeyed container, whatever it holds.
    struct Skip: Decodable { init(from decoder: any Decoder) throws {} }

    /// The lossy-array pattern: an element that fails is skipped and the next one read.
    struct LossyColors: Decodable, Equatable {
        var colors: [Color] = []
        var unknown: [String] = []

        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            while !container.isAtEnd {
                if let color = try? container.decode(Color.self) {
                    colors.append(color)
                } else {
                    unknown.append(try container.decode(String.self))
                }
            }
        }
    }

    struct LossySkipping: Decodable, Equatable {
        var colors: [Color] = []

        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            while !container.isAtEnd {
                do { colors.append(try container.decode(Color.self)) } catch {
                    _ = try? container.decode(Skip.self)
                }
            }
        }
    }

    /// Retries until the container is at its end; gives up (and says so) after 1,000 tries, so
    /// that a container that never moves fails the test instead of hanging it.
    struct RetryingFloats: Decodable, Equatable {
        /// How many tries the last decode took (one test decodes this type).
        static let lastTries = Mutex(0)
        var values: [Float] = []
        var gaveUp = false

        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            var tries = 0
            defer { Self.lastTries.withLock { $0 = tries } }
            while !container.isAtEnd {
                tries += 1
                if tries > 1_000 {
                    gaveUp = true
                    break
                }
                if let value = try? container.decode(Float.self) { values.append(value) }
            }
        }
    }

    struct Plain: Codable, Equatable {
        var a: Int
        var b: String?
    }

    /// Hand-written documents: whatever Foundation answers (a value or an error), the codec
    /// answers the same, including for a type whose `init(from:)` catches errors and tries
    /// something else.
    @Test func handWrittenDocumentsGiveFoundationsAnswer() throws {
        let codec = JSONValueCodec()
        func same<T: Decodable & Equatable>(_ json: String, as type: T.Type, fast: Bool? = nil) {
            let data = Data(json.utf8)
            let theirs = Result { try JSONDecoder().decode(T.self, from: data) }
            let ours = Result { try codec.decode(T.self, from: data) }
            switch (theirs, ours) {
            case (.success(let a), .success(let b)): #expect(a == b, "\(json)")
            case (.failure(let a), .failure(let b)):
                #expect(String(describing: a) == String(describing: b), "\(json)")
            default: Issue.record("\(json): Foundation \(theirs), SnapshotDB \(ours)")
            }
            if let fast { #expect((FastJSON.decode(T.self, from: data) != nil) == fast, "\(json)") }
        }
        same(#" { "a" : 1 , "b" : "x" } "#, as: Plain.self, fast: true)
        same(#"{"a":1}"#, as: Plain.self, fast: true)
        same(#"{"a":1,"b":null}"#, as: Plain.self, fast: true)
        same(#"{"a":-0,"b":"\u00e9\ud83d\ude00\/\"\\\b\f\n\r\t"}"#, as: Plain.self, fast: true)
        same(#"{"a":1,"b":"x","extra":[1,{"deep":[true,false,null]}]}"#, as: Plain.self, fast: true)
        same(#"{"a":1.0}"#, as: Plain.self, fast: false)
        same(#"{"a":1e2}"#, as: Plain.self, fast: false)
        same(#"{"a":1.5}"#, as: Plain.self, fast: false)
        same(#"{"a":01}"#, as: Plain.self, fast: false)
        same(#"{"a":9223372036854775808}"#, as: Plain.self, fast: false)
        same(#"{"a":"1"}"#, as: Plain.self, fast: false)
        same(#"{"a":null}"#, as: Plain.self, fast: false)
        same(#"{"b":"x"}"#, as: Plain.self, fast: false)
        same(#"{"a":1,"a":2}"#, as: Plain.self, fast: false)
        same(#"{"a":1} x"#, as: Plain.self, fast: false)
        same(#"{"a":1,}"#, as: Plain.self, fast: false)
        same(#"{"a":1,"b":"\ud800"}"#, as: Plain.self, fast: false)
        same(#"{"a":1,"b":"\x"}"#, as: Plain.self, fast: false)
        same("{\"a\":1,\"b\":\"tab\tinside\"}", as: Plain.self, fast: false)
        same(#"{"a":1,"b":"unterminated}"#, as: Plain.self, fast: false)
        same(#"{"a":tru}"#, as: Plain.self, fast: false)
        same(#"[1,2]"#, as: Plain.self, fast: false)
        same(#""#, as: Plain.self, fast: false)
        same(#"{"n":3}"#, as: Lenient.self, fast: true)
        same(#"{"n":2.6}"#, as: Lenient.self, fast: false)
        same(#"{"n":"x"}"#, as: Lenient.self, fast: false)
        // An element whose decode failed, caught by the value's own code: Foundation's container
        // stays on it, so the next decode reads it again.
        same(#"["red","purple","blue"]"#, as: LossyColors.self, fast: false)
        same(#"["red","purple","blue"]"#, as: LossySkipping.self, fast: false)
        same(#"["red","blue"]"#, as: LossyColors.self, fast: true)
        same(#"[0.5,1.5]"#, as: RetryingFloats.self, fast: false)
        // Handing a Float over moved past it: two elements, two tries.
        #expect(FastJSON.decode(RetryingFloats.self, from: Data("[0.5,1.5]".utf8)) == nil)
        #expect(RetryingFloats.lastTries.withLock { $0 } == 2)
        same(#"[1,2,3]"#, as: [Int].self, fast: true)
        // Arrays of plain types are read in place; anything unusual in them is Foundation's.
        same(#" [ "a" , "b\n" , "" ] "#, as: [String].self, fast: true)
        same(#"[]"#, as: [String].self, fast: true)
        same(#"["a",null]"#, as: [String].self, fast: false)
        same(#"["a",1]"#, as: [String].self, fast: false)
        same(#"[1,2.5]"#, as: [Int].self, fast: false)
        same(#"[1,-2,9223372036854775807]"#, as: [Int].self, fast: true)
        same(#"[1.5,-2,1e3]"#, as: [Double].self, fast: true)
        same(#"[1.5,"x"]"#, as: [Double].self, fast: false)
        same(#"[true,false]"#, as: [Bool].self, fast: true)
        same(#"[true,0]"#, as: [Bool].self, fast: false)
        same(#"{"x":["a","b"]}"#, as: [String: [String]].self, fast: true)
        same(#"[["a"],[],["b","c"]]"#, as: [[String]].self, fast: true)
        same(#"[1,null]"#, as: [Int?].self, fast: true)
        same(#"{"x":1.5,"y":-2}"#, as: [String: Double].self, fast: true)
        same(#""plain""#, as: String.self, fast: true)
        same(#"42"#, as: Int.self, fast: true)
        same(#"300"#, as: Int8.self, fast: false)
        same(#"-1"#, as: UInt.self, fast: false)
        same(#"1e400"#, as: Double.self, fast: false)
        // A zero written with an exponent, and an underflow, are Foundation's to answer.
        same(#"0e1"#, as: Double.self, fast: false)
        same(#"{"ratio":-0.00e1}"#, as: [String: Double].self, fast: false)
        same(#"1e-400"#, as: Double.self, fast: false)
        same(#"0.0"#, as: Double.self, fast: false)
        same(#"0"#, as: Double.self, fast: true)
        same(#"-0"#, as: Double.self, fast: true)
        same(#"{"1":"a","2":"b"}"#, as: [Int: String].self, fast: true)
        same(#"true"#, as: Bool.self, fast: true)
        same(
            String(repeating: "[", count: 300) + String(repeating: "]", count: 300), as: [Int].self,
            fast: false)
        // Two members that are one integer key: which wins is the order of Foundation's
        // dictionary (it varies from run to run), so the value goes to Foundation.
        #expect(FastJSON.decode([Int: String].self, from: Data(#"{"1":"a","01":"b"}"#.utf8)) == nil)
        #expect(try codec.decode([Int: String].self, from: Data(#"{"1":"a","01":"b"}"#.utf8)).count == 1)
        // Invalid UTF-8 inside a string.
        var invalid = Data(#"{"a":1,"b":""#.utf8)
        invalid.append(contentsOf: [0xC3, 0x28])
        invalid.append(contentsOf: Data(#""}"#.utf8))
        let theirs = Result { try JSONDecoder().decode(Plain.self, from: invalid) }
        let ours = Result { try codec.decode(Plain.self, from: invalid) }
        #expect(String(describing: theirs) == String(describing: ours))
    }
}

/// Scans and builds decode the JSON codec's values where SQLite holds them, and hand other
/// codecs a copy.
@Suite("Values decoded in place")
struct InPlaceDecodingTests {
    struct Measured: Codable, Sendable, Equatable {
        var name: String
        var weight: Float  // Foundation decodes it: the in-place bytes go to `JSONDecoder`
        var blob: Data
    }

    @Test func aScanDecodesInPlaceAndThroughFoundation() throws {
        try withTemporaryDatabase { db throws in
            let values = (0..<50).map {
                Measured(name: "n\($0)", weight: Float($0) / 3, blob: Data(repeating: UInt8($0), count: $0))
            }
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for (index, value) in values.enumerated() {
                    try txn.set(value, forKey: String(format: "k%02d", index), inCollection: "m")
                }
                try txn.set(["not": "a Measured"], forKey: "zz", inCollection: "bad")
            }
            try writer.read { txn throws in
                #expect(try txn.values(inCollection: "m", as: Measured.self).map(\.value) == values)
                let error = try #require(throws: DatabaseError.self) {
                    try txn.values(inCollection: "bad", as: Measured.self)
                }
                #expect(error.code == .decodingFailed)
                #expect(error.key == "zz")
            }
        }
    }

    struct Plain: Codable, Sendable, Equatable {
        var name: String
        var count: Int
        var score: Double
    }

    /// Plain records, which the codec's own decoder reads from SQLite's buffer, and an empty
    /// value (a foreign client's), refused as Foundation refuses it.
    @Test func aScanOfPlainRecordsDecodesThemInPlace() throws {
        try withTemporaryDatabase { db throws in
            let values = (0..<200).map { Plain(name: "n\($0)", count: $0 * 7, score: Double($0) / 8) }
            try db.newConnection(name: "writer").readWrite { txn in
                for (index, value) in values.enumerated() {
                    try txn.set(value, forKey: String(format: "k%03d", index), inCollection: "p")
                }
            }
            let reader = db.newConnection(name: "reader")
            #expect(
                try reader.read { try $0.values(inCollection: "p", as: Plain.self).map(\.value) } == values)
            _ = try sqlite3(
                db.path, "UPDATE snapshotdb_values SET data = X'' WHERE collection = 'p' AND key = 'k007';")
            let error = try #require(throws: DatabaseError.self) {
                try reader.read { try $0.values(inCollection: "p", as: Plain.self) }
            }
            #expect(error.code == .decodingFailed)
            #expect(error.key == "k007")
        }
    }

    /// Two extensions of different value types built together over the same values: the second
    /// decodes the lent bytes after the first has written its own rows.
    @Test func extensionsOfTwoTypesBuiltTogetherEachDecodeTheLentBytes() throws {
        struct Named: Codable, Sendable { var name: String }
        struct Counted: Codable, Sendable { var count: Int }
        let byCount = SecondaryIndex<Counted>(
            name: "byCount", version: "1", collections: ["p"], columns: [.integer("count")],
            extract: { _, _, value in ["count": .integer(value.count)] })
        let byName = View<Named>(
            name: "byName", version: "1", collections: ["p"], group: { _, _, _ in "all" },
            sortKey: { _, _, value in SortKey(value.name) })
        try withTemporaryDatabase { db throws in
            var random = SeededGenerator(state: 3)
            var values: [String: Plain] = [:]
            try db.newConnection(name: "writer").readWrite { txn in
                for index in 0..<500 {
                    let value = Plain(
                        name: "n\(Int.random(in: 0..<1000, using: &random))",
                        count: Int.random(in: 0..<50, using: &random),
                        score: 0)
                    values["k\(index)"] = value
                    try txn.set(value, forKey: "k\(index)", inCollection: "p")
                }
            }
            try db.register(byCount, byName)
            try db.newConnection(name: "reader").read { txn throws in
                let expected = values.sorted { a, b in
                    if a.value.name != b.value.name {
                        return Array(a.value.name.utf8).lexicographicallyPrecedes(Array(b.value.name.utf8))
                    }
                    return a.key < b.key
                }.map { ViewItem(collection: "p", key: $0.key) }
                #expect(try txn.view(named: "byName").items(inGroup: "all") == expected)
                let index = try txn.index(named: "byCount")
                for count in [0, 17, 49] {
                    let keys = try index.keys(where: "count = ?", [.integer(count)])
                    #expect(Set(keys.map(\.key)) == Set(values.filter { $0.value.count == count }.map(\.key)))
                }
            }
        }
    }

    /// A view over a collection of raw `Data`: the codec's value is the bytes themselves, so
    /// the build must hand it a copy (the view keeps the values it sorts until it writes them).
    @Test func aBuildOverAnotherCodecGetsACopy() throws {
        try withTemporaryDatabase { db throws in
            try db.register(RawDataCodec(), forCollection: "raw")
            var random = SeededGenerator(state: 7)
            var stored: [String: Data] = [:]
            try db.newConnection(name: "writer").readWrite { txn in
                for index in 0..<300 {
                    let bytes = Data(
                        (0..<Int.random(in: 1...40, using: &random)).map { _ in
                            UInt8.random(in: 0...255, using: &random)
                        })
                    stored["k\(index)"] = bytes
                    try txn.set(bytes, forKey: "k\(index)", inCollection: "raw")
                }
            }
            let byBytes = View<Data>(
                name: "byBytes", version: "1", collections: ["raw"], group: { _, _, _ in "all" },
                areInIncreasingOrder: { $0.lexicographicallyPrecedes($1) })
            try db.register(byBytes)
            let expected = stored.sorted { a, b in
                a.value.lexicographicallyPrecedes(b.value) || (a.value == b.value && a.key < b.key)
            }.map { ViewItem(collection: "raw", key: $0.key) }
            try db.newConnection(name: "ui").read { txn throws in
                #expect(try txn.view(named: "byBytes").items(inGroup: "all") == expected)
            }
        }
    }
}
