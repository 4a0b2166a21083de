"""Metadata stores: ZooKeeper (kazoo), sqlite (embedded default) and memory."""

from walkit.metadata._store import MetadataStore, Versioned, WatchEvent, WatchEventKind

__all__ = ["MetadataStore", "Versioned", "WatchEvent", "WatchEventKind"]
