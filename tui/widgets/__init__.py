"""Widgets of the main screen, one per file."""
