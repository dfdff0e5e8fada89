"""Replay and ranking diff, golden queries, impact preview, access log, freshness and trace export."""
