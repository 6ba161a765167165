// swift-tools-version:6.1
import PackageDescription

/// The settings of the root package: Swift 6 language mode with complete strict concurrency
/// and explicit imports.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "SnapshotDBBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        // The root package. Named, because a path dependency's identity is its directory's
        // name, which differs between clones and worktrees; products refer to it by this name.
        .package(name: "SnapshotDB", path: "../"),
        .package(url: "https://github.com/groue/GRDB.swift.git", exact: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
    ],
    targets: [
        // Raw SQLite for the C baseline. Its own module (not the root package's internal
        // `CSQLite`, not GRDB's `GRDBSQLite`), imported only by the file that runs the C side.
        .systemLibrary(
            name: "CSQLiteBench",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // Lets a profiler count only the measured parts (callgrind's client request).
        // DWARF 4: valgrind 3.19 cannot read the toolchain's default DWARF 5 for C.
        .target(name: "CCallgrind", cSettings: [.unsafeFlags(["-gdwarf-4"])]),
        .executableTarget(
            name: "snapshotdb-benchmarks",
            dependencies: [
                "CSQLiteBench",
                "CCallgrind",
                .product(name: "SnapshotDB", package: "SnapshotDB"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
    ]
)
