"""walkit's bookie: the storage server of the replication protocol."""
