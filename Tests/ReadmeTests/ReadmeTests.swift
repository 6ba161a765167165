import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

/// The README's Swift blocks are code this target compiles (`ReadmeSnippets.swift`), and the
/// ones that can run do, in order, on a new database.
@Suite("README")
struct ReadmeTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// A README block: its name, the context it claims, and its lines.
    struct Block {
        let name: String
        let context: String
        let lines: [String]
    }

    /// Every Swift block of the README, with the marker before it.
    static func readmeBlocks() throws -> (marked: [Block], unmarked: Int) {
        let text = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = text.components(separatedBy: "\n")
        var blocks: [Block] = []
        var unmarked = 0
        var index = 0
        while index < lines.count {
            guard lines[index] == "```swift" else {
                index += 1
                continue
            }
            let marker = index > 0 ? lines[index - 1] : ""
            var end = index + 1
            while end < lines.count && lines[end] != "```" { end += 1 }
            let body = Array(lines[(index + 1)..<end])
            let pattern = /<!-- readme-snippet: (\w+) \(([^)]*)\) -->/
            if let match = marker.wholeMatch(of: pattern) {
                blocks.append(Block(name: String(match.1), context: String(match.2), lines: body))
            } else {
                unmarked += 1
            }
            index = end + 1
        }
        return (blocks, unmarked)
    }

    /// `line` without white space: formatting may differ, code may not.
    static func squeezed(_ line: String) -> String { line.filter { !$0.isWhitespace } }

    /// Every README block is in `ReadmeSnippets.swift`: each of its lines, in order, between the
    /// block's markers there (imports aside: the file has them at its top).
    @Test func everyReadmeBlockIsCompiledCode() throws {
        let (blocks, unmarked) = try Self.readmeBlocks()
        #expect(unmarked == 0, "a ```swift block of the README has no readme-snippet marker before it")
        #expect(blocks.count >= 15)
        let source = try String(
            contentsOf: Self.packageRoot.appendingPathComponent("Tests/ReadmeTests/ReadmeSnippets.swift"),
            encoding: .utf8
        ).components(separatedBy: "\n")
        for block in blocks where block.name != "manifest" {
            guard let start = source.firstIndex(of: "// readme-snippet: \(block.name)"),
                let end = source.firstIndex(of: "// end readme-snippet: \(block.name)"), start < end
            else {
                Issue.record(
                    "README block '\(block.name)' has no copy between markers in ReadmeSnippets.swift")
                continue
            }
            // The copy's text without white space, searched line by line from where the last
            // line was found: formatting (wrapped lines, spacing) may differ, code may not, and
            // the copy may hold scaffolding between the lines.
            let copy = source[(start + 1)..<end].map(Self.squeezed).joined()
            var cursor = copy.startIndex
            for line in block.lines where !line.hasPrefix("import ") {
                let wanted = Self.squeezed(line)
                guard !wanted.isEmpty else { continue }
                guard let found = copy[cursor...].range(of: wanted) else {
                    Issue.record(
                        "README block '\(block.name)': this line is not in its compiled copy: \(line)")
                    break
                }
                cursor = found.upperBound
            }
        }
    }

    static let childKey = "SNAPSHOTDB_README_CHILD"

    /// The synchronous blocks run in README order on a new database, in a child process that
    /// works in a directory of its own (the blocks open "app.sqlite").
    @Test func readmeBlocksRunInOrder() throws {
        try withTemporaryDirectory { directory throws in
            let testBinary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
            let child = try ChildProcess.run(
                testBinary, ["--testing-library", "swift-testing", "--filter", "childRunsTheReadmeBlocks"],
                environment: [Self.childKey: directory.path])
            #expect(child.status == 0, "\(child.standardOutput)\n\(child.standardError)")
            #expect(child.standardOutput.contains("README BLOCKS RAN"), "\(child.standardOutput)")
            // What the blocks wrote is in the file they opened.
            #expect(
                FileManager.default.fileExists(atPath: directory.appendingPathComponent("app.sqlite").path))
        }
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[ReadmeTests.childKey] != nil))
    func childRunsTheReadmeBlocks() throws {
        let directory = try #require(ProcessInfo.processInfo.environment[Self.childKey])
        #expect(FileManager.default.changeCurrentDirectoryPath(directory))
        let (db, ui, writer) = try usage()
        try summary(ui: ui)
        try metadata(ui: ui, writer: writer)
        try errors(writer: writer)
        try history(reader: writer)
        let byTitle = try views(db: db, ui: ui, writer: writer)
        // "inbox" before "work"; in the inbox, "Beer" (empty body) before "Milk".
        #expect(try keyed(db: db, writer: writer)?.key == "n3")
        let search = try indexes(db: db, ui: ui, writer: writer)
        try results(db: db, ui: ui, byTitle: byTitle, search: search)
        // What the blocks did, checked: the last view registered, the values written.
        #expect(db.registeredExtensions == ["byFolderThenTitle", "byTitle", "found", "notes", "people"])
        #expect(try ui.read { try $0.count(inCollection: "notes") } == 3)
        #expect(try ui.read { try $0.value(forKey: "1", inCollection: "items", as: Item.self) }?.title == "b")
        try db.close()
        // The migration block, on a file with a draft in the old shape.
        do {
            let old = try Database(path: "migrate.sqlite")
            try old.newConnection().readWrite {
                try $0.set(["title": "t", "text": "x"], forKey: "d1", inCollection: "drafts")
            }
        }
        let migrated = try migration(migratedPath: "migrate.sqlite")
        #expect(
            try migrated.newConnection().read {
                try $0.value(forKey: "d1", inCollection: "notes-v2", as: [String: String].self)
            } == ["title": "t", "body": "x"])
        print("README BLOCKS RAN")
    }
}
