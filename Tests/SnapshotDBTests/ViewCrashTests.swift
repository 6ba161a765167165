import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Extensions are updated in the same SQLite transaction as their values: a process killed in
/// the middle of writing leaves a view, a secondary index and a full-text index that equal a
/// rebuild from the values that survived.
@Suite("Extensions after a crash")
struct ViewCrashTests {
    static let childKey = "SNAPSHOTDB_VIEW_CRASH_CHILD_DB"

    /// An index over the notes' folder and title.
    static let byFolder = SecondaryIndex<Note>(
        name: "byFolder", version: "1", collections: ["notes"], columns: [.text("folder"), .text("title")],
        extract: { _, _, note in ["folder": .text(note.folder), "title": .text(note.title)] })

    /// A full-text index of the notes' titles, which hold words ("w12 w7").
    static let titles = FullTextSearch<Note>(
        name: "titles", version: "1", collections: ["notes"], columns: ["title"],
        extract: { _, _, note in ["title": note.title] })

    static func registerAll(_ db: Database) throws {
        try db.register(ViewTests.byTitle)
        try db.register(byFolder)
        try db.register(titles)
    }

    /// Timeline: the child registers the view and commits transactions of several writes each,
    /// printing the number of each commit | after 40 commits this process kills it with
    /// SIGKILL, wherever it is | reopened, the view's rows are those of a brute-force sort of
    /// the values, the index and the full-text index answer what a brute-force filter of the
    /// values answers, and registering the same versions again changes nothing.
    @Test func aKilledWriterLeavesTheViewInStepWithTheValues() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("crash.sqlite").path
            let testBinary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
            let child = try ChildProcess(
                testBinary, ["--testing-library", "swift-testing", "--filter", "childWritesUntilKilled"],
                environment: [Self.childKey: path])
            while true {
                let line = try child.readLine()
                if line.hasPrefix("committed "), Int(line.dropFirst(10)) ?? 0 >= 40 { break }
            }
            child.kill()
            let db = try Database(path: path)
            try Self.registerAll(db)
            #expect(db.latestCommit >= 40)
            try db.newConnection().read { txn throws in
                let view = try txn.view(named: "byTitle")
                let expected = try ViewTests.expectedRows(txn)
                #expect(ViewTests.rows(view) == expected)
                #expect(view.count > 0)

                let values = try txn.values(inCollection: "notes", as: Note.self)
                let index = try txn.index(named: "byFolder")
                for folder in ["inbox", "work", "home"] {
                    let keys = try index.keys(where: "folder = ?", [.text(folder)], orderBy: nil, limit: nil)
                    let matching = values.filter { $0.value.folder == folder }.map(\.key)
                    #expect(Set(keys.map(\.key)) == Set(matching), "folder \(folder)")
                    #expect(keys.count == matching.count && !matching.isEmpty)
                }
                let search = try txn.search(named: "titles")
                for word in ["w0", "w3", "w17"] {
                    let hits = try search.keys(matching: word, limit: 10_000)
                    let matching = values.filter {
                        $0.value.title.split(separator: " ").contains(Substring(word))
                    }
                    #expect(Set(hits.map(\.key)) == Set(matching.map(\.key)), "word \(word)")
                    #expect(!hits.isEmpty, "word \(word)")
                }
            }
            #expect(try isIntact(path))
        }
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[childKey] != nil))
    func childWritesUntilKilled() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childKey])
        let db = try Database(path: path)
        try Self.registerAll(db)
        let writer = db.newConnection(name: "child")
        var random = SeededGenerator(state: 7)
        let folders = ["inbox", "work", "home"]
        while true {
            let commit = try writer.readWrite { txn in
                for _ in 0..<8 {
                    let key = "n\(Int.random(in: 0..<200, using: &random))"
                    if Int.random(in: 0..<4, using: &random) == 0 {
                        try txn.removeValue(forKey: key, inCollection: "notes")
                    } else {
                        let note = Note(
                            title:
                                "w\(Int.random(in: 0..<20, using: &random)) w\(Int.random(in: 0..<20, using: &random))",
                            folder: folders.randomElement(using: &random)!, archived: false)
                        try txn.set(note, forKey: key, inCollection: "notes")
                    }
                }
                return txn.commit + 1
            }
            // Unbuffered, so the parent sees each line as soon as the commit returned.
            FileHandle.standardOutput.write(Data("committed \(commit)\n".utf8))
        }
    }
}
