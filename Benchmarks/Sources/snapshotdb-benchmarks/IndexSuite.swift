/// The `indexes` suite (see SuiteName/indexes).
func runIndexSuite(_ context: SuiteContext) throws -> SuiteReport {
    SuiteReport(title: "indexes", columns: [])
}
