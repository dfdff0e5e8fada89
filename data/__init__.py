"""Shipped sample memory: ``demo.jsonl`` (the demo wings)."""
