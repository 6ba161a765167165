/// The namespace of the inspection library (filled in by the inspection work).
public enum SnapshotDBInspection {}
