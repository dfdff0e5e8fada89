"""The product a vector scan runs (``memlens.store.speed.vindex``): one choice per process.

Which product runs that pass fastest depends on the CPU: numpy's own einsum
loop beat BLAS's sgemv by 1.9× on an AMD EPYC, sgemv beat einsum by 1.5× on an
Intel Xeon (100k × 384, one thread). When it warms an index that large (or
else before its first large scan), a process times both on a matrix twice the
size of the CPU's last cache (at least 32 MB: a large scan streams from memory,
so a matrix read from the cache times the wrong thing) and keeps the faster
for its large scans (``kernel()``). BLAS's threads must beat einsum's one
thread clearly (``choose``), or einsum is kept: on a Zen 4 EPYC with a 32 MB
L3 the two tie on 100k vectors (6.2 ms), and two threads wait for a core
whenever other work holds one. Both compute the same dot products, in a
different order of additions (last-bit differences).

A small scan (up to ``ONE_CORE`` floats: ~11k vectors of 384 dimensions) is
einsum's, on the calling thread, whatever was chosen: it reads a few MB, which
one core streams as fast as two, while BLAS's sgemv splits it between threads
that wait for a core whenever other work holds one. Measured on 2.8k real
vectors between real query embeddings, with one core busy elsewhere: the
vector stage took 6.0 ms with sgemv's two threads, 0.8 ms with one thread or
with einsum.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ONE_CORE = 1 << 22  # a scan of at most this many floats (16 MB) runs on the calling thread alone (einsum)
CALIBRATE_FLOATS = 2 * ONE_CORE  # the kernels are timed on at least this many floats (32 MB) ...
CALIBRATE_MAX_FLOATS = 1 << 25  # ... and at most this many (128 MB): twice the CPU's last cache between them (a
# CPU with a last cache over 64 MB is timed on 128 MB, partly from its cache)
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")  # Linux: index*/level and index*/size ("32768K")
THREADS_MARGIN = 0.85  # BLAS's threads are chosen only if they take under this share of einsum's time


def _einsum(matrix: np.ndarray, q: np.ndarray, out: np.ndarray) -> None:
    np.einsum("ij,j->i", matrix, q, out=out)


def _sgemv(matrix: np.ndarray, q: np.ndarray, out: np.ndarray) -> None:
    np.matmul(matrix, q, out=out)


KERNELS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], None]] = {"einsum": _einsum, "sgemv": _sgemv}
_kernel: str | None = None  # chosen before the process's first scan (``calibrate``)
_kernel_lock = threading.Lock()


def kernel() -> str | None:
    """The product this process's large scans use (None before its first large scan or warm-up)."""
    return _kernel


def calibration_floats() -> int:
    """Floats in the matrix the kernels are timed on: twice the CPU's largest cache (read from sysfs where there is
    one), within [CALIBRATE_FLOATS, CALIBRATE_MAX_FLOATS]."""
    largest = 0
    try:
        indexes = list(CPU_CACHES.glob("index*"))
    except OSError:
        indexes = []
    for index in indexes:
        try:
            size = (index / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
            largest = max(largest, int(size.rstrip("KMG")) * scale)
        except (OSError, ValueError):  # one cache not said (or not readable): the others still count
            continue
    return min(max(CALIBRATE_FLOATS, 2 * largest // 4), CALIBRATE_MAX_FLOATS)


def choose(best: dict[str, float]) -> str:
    """The product for large scans from each one's best time: einsum (one thread) unless BLAS's threads take
    clearly less (``THREADS_MARGIN``)."""
    return "sgemv" if best["sgemv"] < THREADS_MARGIN * best["einsum"] else "einsum"


def calibrate(dim: int) -> str:
    """Time each kernel seven times, alternating, on a matrix beyond the CPU's caches (``calibration_floats``:
    what decides is how fast the product streams memory); ``choose`` picks from the best times, for every large
    scan of the process. Three rounds let a busy moment pick the slower one now and then; seven cost 0.1-0.4 s once.
    On a 12 MB matrix sgemv's two threads won while einsum scanned 100k vectors faster (12.7 against 15.9 ms),
    and on a 32 MB one inside a 32 MB L3 by 3x, where the two tied on 100k vectors."""
    global _kernel
    with _kernel_lock:
        if _kernel is not None:
            return _kernel
        rows = calibration_floats() // dim
        matrix = np.full((rows, dim), 0.5, dtype=np.float32)
        q = np.full(dim, 0.25, dtype=np.float32)
        out = np.empty(rows, dtype=np.float32)
        best = {name: float("inf") for name in KERNELS}
        for _ in range(7):
            for name, fn in KERNELS.items():
                t = time.perf_counter()
                fn(matrix, q, out)
                best[name] = min(best[name], time.perf_counter() - t)
        _kernel = choose(best)
        return _kernel


def for_scan(floats: int, dim: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """The product for a scan of ``floats`` floats of ``dim``-vectors: einsum up to ``ONE_CORE``, else the process's
    choice (made now if not yet)."""
    if floats <= ONE_CORE:
        return KERNELS["einsum"]
    return KERNELS[_kernel or calibrate(dim)]


def prepare(floats: int, dim: int) -> None:
    """Before any search: choose the product now when an index of ``floats`` floats makes a large scan."""
    if _kernel is None and floats > ONE_CORE:
        calibrate(dim)
