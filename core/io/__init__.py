"""Entries in and out of the store: JSONL import and export (``jsonl``)."""
