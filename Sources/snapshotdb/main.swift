print("snapshotdb: not yet")
