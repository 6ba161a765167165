/// The `scaling` suite (see SuiteName/scaling).
func runScalingSuite(_ context: SuiteContext) throws -> SuiteReport {
    SuiteReport(title: "scaling", columns: [])
}
