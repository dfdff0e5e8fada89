"""Storage: one SQLite file (sqlite-vec vectors, FTS5 text) behind the interface in ``base``.

- ``base``: the interface (``Store`` = ``Reads`` + ``Writes``; ``Writer``, one write transaction; ``TaskRows``)
- ``reads``: the read half (what the retrieval pipeline asks); ``sqlite_reads``: its SQLite answer
- ``sqlite``: ``SqliteStore``, the write half (connections, meta, audit, retrieval log, generations)
- ``writer``: ``SqliteWriter``, what one write transaction does (entry rows, vectors, audit, generation bumps)
- ``rows``: the one mapping between an entry row and an ``Entry``, and checks of stored rows
- ``writes``: entry writes (add, update, delete, add-unique) over the interface
- ``db``: connections and transactions; ``schema``: the migrations
- ``staging``: imports invisible until published (the rules, owners, clean-up); ``importer``: writes one
- ``task_rows``: the working-memory tables; ``distinct``: cached wings and rooms
- ``vindex``, ``vectors``: the in-process vector index, and vectors that cannot be compared
- ``check``, ``salvage``, ``corruption``: damage found, reported and recovered from
- ``audit_sql``: the audit and the retrieval log; ``retention``: keeping that log bounded
- ``newstore``: which store a name points to, and a store a failed command created goes again
- ``attribution``: which client a write is made for (audit rows name it)
"""
