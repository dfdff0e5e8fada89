"""Moved to ``memlens.attribution`` (the store's audit writer uses it, so it sits below the front ends);
these names stay importable from here."""

from memlens.attribution import MAX_LEN, acting_as, client_record, current, describe, stamp

__all__ = ["MAX_LEN", "acting_as", "client_record", "current", "describe", "stamp"]
