"""Shared plumbing every concern builds on: params and their resolution, schemas, the stage contracts, model identity
(`fingerprints`) and loading, content-defined shards and cache keys, stage file I/O.

May import: `tasks.core` only.
"""
