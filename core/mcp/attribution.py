"""Who made a write: the client named in each audit row (lives in ``memlens.store.attribution``, beside the
audit writer that stamps it; re-exported here for the MCP server)."""

from memlens.store.attribution import MAX_LEN, acting_as, client_record, current, describe, stamp

__all__ = ["MAX_LEN", "acting_as", "client_record", "current", "describe", "stamp"]
