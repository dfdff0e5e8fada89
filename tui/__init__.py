"""The memlens terminal app (Textual). Only calls the engine's public API."""
