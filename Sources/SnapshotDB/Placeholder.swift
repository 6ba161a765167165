/// Placeholder.
public enum SnapshotDBPlaceholder {}
