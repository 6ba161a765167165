/// The `views` suite (see SuiteName/views).
func runViewSuite(_ context: SuiteContext) throws -> SuiteReport {
    SuiteReport(title: "views", columns: [])
}
