// swift-tools-version:6.0
import PackageDescription

/// Settings every target of the package is held to: Swift 6 language mode (set by the tools
/// version) with complete strict concurrency, and the upcoming features that make imports explicit.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "SnapshotDB",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "SnapshotDB", targets: ["SnapshotDB"]),
        .library(name: "SnapshotDBInspection", targets: ["SnapshotDBInspection"]),
        .executable(name: "snapshotdb", targets: ["snapshotdb"]),
        .executable(name: "snapshotdb-stress", targets: ["snapshotdb-stress"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .target(
            name: "CSnapshotDBVFS",
            dependencies: ["CSQLite"]
        ),
        .target(
            name: "SnapshotDBLocking",
            swiftSettings: strictSettings
        ),
        .target(
            name: "SnapshotDBInspection",
            dependencies: ["SnapshotDBLocking"],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SnapshotDB",
            dependencies: [
                "CSQLite",
                "CSnapshotDBVFS",
                "SnapshotDBInspection",
                "SnapshotDBLocking",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "HeapModule", package: "swift-collections"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "snapshotdb",
            dependencies: [
                "SnapshotDBLocking",
                "SnapshotDB",
                "SnapshotDBInspection",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "snapshotdb-stress",
            dependencies: [
                "SnapshotDB",
                "SnapshotDBLocking",
                "SnapshotDBInspection",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "SnapshotDBTestSupport",
            dependencies: [.product(name: "Logging", package: "swift-log")],
            path: "Tests/SnapshotDBTestSupport",
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SnapshotDBTests",
            dependencies: [
                "SnapshotDB",
                "SnapshotDBInspection",
                "SnapshotDBLocking",
                "SnapshotDBTestSupport",
                "CSQLite",
                "CSnapshotDBVFS",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "ReadmeTests",
            dependencies: ["SnapshotDB", "SnapshotDBTestSupport"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "SnapshotDBInspectionTests",
            dependencies: ["SnapshotDBInspection", "SnapshotDBTestSupport", "snapshotdb"],
            swiftSettings: strictSettings
        ),
    ]
)

// The DocC plugin builds the manual (`Sources/SnapshotDB/SnapshotDB.docc`) in CI and for
// writers of the docs. It is a dependency only when `SNAPSHOTDB_DOCS` is set, so that an app
// that depends on SnapshotDB never fetches or resolves it:
// `SNAPSHOTDB_DOCS=1 swift package generate-documentation --target SnapshotDB --warnings-as-errors`.
if Context.environment["SNAPSHOTDB_DOCS"] != nil {
    package.dependencies.append(
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"))
}
