print("snapshotdb-stress: not yet")
