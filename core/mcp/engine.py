"""The server's one ``Memory``, opened and warmed in the background (``Engine``).

The loader thread opens the store first, then loads the embedding model, then
the in-process vector index. A tool that needs the model waits for it.

Closing never cuts the store's opening short (a new store's schema is written
then), but it does not wait for the model: loading it reads the model files
and writes only the model cache (atomically), never the store. So a server
stopped while its model loads closes the store at once and exits, the loader
thread abandoned in its native code (``Engine.close`` says so).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from memlens.errors import MemlensError

ENGINE_WAIT_S = 120.0  # a call that arrives while the store or model loads waits this long at most


class Engine:
    """One ``Memory`` for the server process, opened and warmed in a background thread."""

    def __init__(self, store: str | None = None, *, memory: Any = None, read_only: bool = False) -> None:
        self.store = store
        self.read_only = read_only
        self._mem = memory
        self._error: BaseException | None = None  # the store could not be opened
        self._model_error: BaseException | None = None  # the store is open, the model could not be loaded
        self.store_ready = threading.Event()
        self.model_ready = threading.Event()
        self.timings: dict[str, float] = {}
        self._closing = threading.Event()
        self._stopping = threading.Event()  # the server is stopping: a call still waiting for the engine is not run
        self._using_store = threading.Lock()  # held by the loader while it uses the open store; close() takes it
        self._thread: threading.Thread | None = None
        if memory is not None:
            self.store_ready.set()

    def start(self, warm: bool = True) -> None:
        self._thread = threading.Thread(target=self._warm, args=(warm,), name="memlens-warm", daemon=True)
        self._thread.start()

    def _warm(self, warm: bool) -> None:
        t0 = time.perf_counter()
        try:
            if self._mem is None:
                from memlens.config import load_settings
                from memlens.memory import Memory

                settings = load_settings()
                if self.read_only:  # write nothing at all, not even the retrieval metrics
                    settings.audit.level = "writes"
                # a read-only server creates no store: a missing one is an error naming the path
                # the retrieval log names a search by the MCP client that asked, "mcp" when it named none
                self._mem = Memory.open(self.store, settings=settings, create=not self.read_only, pooled=True, client="mcp")
            self.timings["store_ms"] = (time.perf_counter() - t0) * 1000
        except BaseException as exc:  # every tool call reports it; the server keeps serving
            self._error = exc
            print(f"memlens mcp: error: {exc}", file=sys.stderr, flush=True)
            self.model_ready.set()
            return
        finally:
            self.store_ready.set()
        try:
            if warm:
                self._mem.embedder.load()  # the store is not used meanwhile: a close does not wait for this
                with self._using_store:
                    if self._closing.is_set():  # the store closed while the model loaded: nothing more to do
                        return
                    self._mem.check_model()
            self.timings["model_ms"] = (time.perf_counter() - t0) * 1000
            print(f"memlens mcp: store {self._mem.path} open, model ready in {self.timings['model_ms'] / 1000:.1f} s",
                  file=sys.stderr, flush=True)
        except BaseException as exc:  # the tools that need the model report it; the others work
            self._model_error = exc
            print(f"memlens mcp: error: {exc}", file=sys.stderr, flush=True)
            return
        finally:
            self.model_ready.set()
        if warm:
            with self._using_store:
                if self._closing.is_set():
                    return
                try:
                    # on the loader thread: no request waits for it, and a stop waits for one wing's read at most
                    self._mem.warm_index(text=True, stop=self._closing.is_set)
                except Exception as exc:  # searches fall back to sqlite-vec
                    print(f"memlens mcp: warning: in-process vector index not loaded: {exc}", file=sys.stderr,
                          flush=True)

    def memory(self, need_model: bool = False) -> tuple[Any, float]:
        """The Memory (waiting for the store, or also the model), and how long this call waited in ms."""
        event = self.model_ready if need_model else self.store_ready
        t0 = time.perf_counter()
        while not event.wait(0.05):  # in slices: a stop ends the wait
            if self._stopping.is_set():
                raise MemlensError("the server is stopping: this call was not run (nothing was written)")
            if time.perf_counter() - t0 >= ENGINE_WAIT_S:
                what = "the embedding model is still loading" if need_model else "the store is still opening"
                raise MemlensError(f"{what}; try again in a moment")
        for error in (self._error, self._model_error if need_model else None):
            if isinstance(error, MemlensError):
                raise MemlensError(str(error))
            if error is not None:
                raise MemlensError(f"the memory engine failed to start: {error}")
        return self._mem, (time.perf_counter() - t0) * 1000

    def stop_waiting(self) -> None:
        """The server is stopping: calls still waiting for the store or the model fail at once, unrun (they would
        otherwise hold the stop for as long as the model takes to load); calls already running finish."""
        self._stopping.set()

    def close(self, timeout: float = 60.0) -> bool:
        """Close the store: once it is open (an opening in progress is let finish, ``timeout`` at most) and the
        loader is not using it (checking the model, reading the vector index), without waiting for a model load.

        False when the loader thread is still running after that (loading the model, in native code, or still
        opening the store after ``timeout``): the caller should then exit hard, without interpreter teardown.
        """
        self._closing.set()
        deadline = time.monotonic() + timeout
        if self._thread is not None and not self.store_ready.wait(timeout):
            return False
        if not self._using_store.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return False
        try:
            if self._mem is not None:
                self._mem.close()
        finally:
            self._using_store.release()
        if self._thread is not None:
            self._thread.join(1.0)  # a loader that had nothing left to do ends at once
            return not self._thread.is_alive()
        return True
