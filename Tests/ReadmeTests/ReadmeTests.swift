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

    /// A block of the README or of an article of the manual: its name, the context it claims,
    /// its lines, and the file it is in.
    struct Block {
        let name: String
        let context: String
        let lines: [String]
        let file: String
    }

    /// The README and every article of the DocC catalog: the files whose Swift blocks are code.
    static func documents() throws -> [URL] {
        let catalog = packageRoot.appendingPathComponent("Sources/SnapshotDB/SnapshotDB.docc")
        let articles = try FileManager.default.contentsOfDirectory(atPath: catalog.path)
            .filter { $0.hasSuffix(".md") }.sorted().map { catalog.appendingPathComponent($0) }
        return [packageRoot.appendingPathComponent("README.md")] + articles
    }

    /// Every Swift block of the README and the manual, with the marker before it.
    static func readmeBlocks() throws -> (marked: [Block], unmarked: [String]) {
        var blocks: [Block] = []
        var unmarked: [String] = []
        for document in try documents() {
            let text = try String(contentsOf: document, encoding: .utf8)
            let lines = text.components(separatedBy: "\n")
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
                    blocks.append(
                        Block(
                            name: String(match.1), context: String(match.2), lines: body,
                            file: document.lastPathComponent))
                } else {
                    unmarked.append("\(document.lastPathComponent), line \(index + 1)")
                }
                index = end + 1
            }
        }
        return (blocks, unmarked)
    }

    /// `line` without white space: formatting may differ, code may not.
    static func squeezed(_ line: String) -> String { line.filter { !$0.isWhitespace } }

    /// Every README block is in `ReadmeSnippets.swift`: each of its lines, in order, between the
    /// block's markers there (imports aside: the file has them at its top).
    @Test func everyReadmeBlockIsCompiledCode() throws {
        let (blocks, unmarked) = try Self.readmeBlocks()
        #expect(unmarked.isEmpty, "```swift blocks with no readme-snippet marker before them: \(unmarked)")
        #expect(blocks.count >= 15)
        let names = blocks.map(\.name)
        #expect(Set(names).count == names.count, "a snippet name is used twice: \(names)")
        let source = try String(
            contentsOf: Self.packageRoot.appendingPathComponent("Tests/ReadmeTests/ReadmeSnippets.swift"),
            encoding: .utf8
        ).components(separatedBy: "\n")
        for block in blocks where block.name != "manifest" {
            guard let start = source.firstIndex(of: "// readme-snippet: \(block.name)"),
                let end = source.firstIndex(of: "// end readme-snippet: \(block.name)"), start < end
            else {
                Issue.record(
                    "block '\(block.name)' of \(block.file) has no copy between markers in ReadmeSnippets.swift"
                )
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
                        "block '\(block.name)' of \(block.file): this line is not in its compiled copy: \(line)"
                    )
                    break
                }
                cursor = found.upperBound
            }
        }
    }

    static func article(_ name: String) throws -> String {
        try String(
            contentsOf: packageRoot.appendingPathComponent("Sources/SnapshotDB/SnapshotDB.docc/\(name).md"),
            encoding: .utf8)
    }

    /// The `--help` text of every command of `snapshotdb` and `snapshotdb-stress`, as the built
    /// tools print it, is the one the command-line article shows under its `help:` marker, and
    /// the article shows no command the tools do not have.
    @Test func theToolsHelpTextsAreTheArticles() throws {
        let text = try Self.article("CommandLineTools")
        let lines = text.components(separatedBy: "\n")
        var shown: [String: String] = [:]
        for (index, line) in lines.enumerated() {
            guard let match = line.wholeMatch(of: /<!-- help: ([a-z -]+) -->/) else { continue }
            #expect(lines[index + 1] == "```text")
            let end = try #require(lines[(index + 2)...].firstIndex(of: "```"))
            shown[String(match.1)] = lines[(index + 2)..<end].joined(separator: "\n")
        }
        let commands = [
            "snapshotdb", "snapshotdb inspect", "snapshotdb history", "snapshotdb watch",
            "snapshotdb checkpoint",
            "snapshotdb demo", "snapshotdb-stress", "snapshotdb-stress run",
        ]
        #expect(Set(shown.keys) == Set(commands))
        for command in commands {
            let words = command.split(separator: " ").map(String.init)
            let tool = try #require(BuiltProducts.executable(words[0]), "\(words[0]) is not built")
            let result = try ChildProcess.run(tool.path, Array(words.dropFirst()) + ["--help"])
            let help = result.standardOutput.trimmingCharacters(in: .newlines)
            #expect(help == shown[command], "`\(command) --help` differs from CommandLineTools.md")
        }
    }

    /// The errors article has a row for every `DatabaseError.Code`.
    @Test func theErrorsArticleNamesEveryCode() throws {
        let source = try String(
            contentsOf: Self.packageRoot.appendingPathComponent(
                "Sources/SnapshotDB/Database/DatabaseError.swift"),
            encoding: .utf8)
        let codes = source.matches(of: /public static let (\w+) = Code\(/).map { String($0.1) }
        #expect(codes.count >= 30)
        let article = try Self.article("Errors")
        for code in codes {
            #expect(article.contains("| `\(code)` |"), "Errors.md has no row for `\(code)`")
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
        #expect(try gettingStarted())
        let (db, ui, writer) = try usage()
        try summary(ui: ui)
        try metadata(ui: ui, writer: writer)
        try errors(writer: writer)
        try errorCodes(writer: writer)
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
