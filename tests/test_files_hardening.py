"""Files memlens reads (capped, regular only) and files it creates (owner-only)."""

import os
import stat
import threading
from pathlib import Path

import pytest

from memlens.errors import MemlensError
from memlens.files import make_private_dirs, read_file, write_private


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def bounded(fn, timeout: float = 30):
    """fn() in a daemon thread; a test failure instead of a hang if it blocks."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"blocked for {timeout} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


# -- the model cache -----------------------------------------------------------------------------


def test_verified_stamp_is_owner_only(tmp_path, settings, umask022):
    from memlens.embed import resolve_model, verified_sha256

    cache = tmp_path / "c1" / "c2"
    spec = resolve_model(settings.embedding)
    verified_sha256(spec, cache)
    stamps = list((cache / "verified").iterdir())
    assert len(stamps) == 1
    assert mode(stamps[0]) == 0o600
    for d in (tmp_path / "c1", cache, cache / "verified"):
        assert mode(d) == 0o700, d
    # a stamp that is not a small regular file is ignored (the weights are hashed again), not read
    stamps[0].unlink()
    stamps[0].symlink_to("/dev/zero")
    assert bounded(lambda: verified_sha256(spec, cache)) == spec.expected_sha256


@pytest.mark.model
def test_onnx_export_is_owner_only(tmp_path, settings, umask022):
    from memlens.embed import export_onnx, resolve_model

    target = tmp_path / "cache" / "onnx" / "abc" / "model.onnx"
    export_onnx(resolve_model(settings.embedding), target)
    assert mode(target) == 0o600
    for d in (tmp_path / "cache", tmp_path / "cache" / "onnx", target.parent):
        assert mode(d) == 0o700, d
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.onnx"]  # no temp file left


def test_an_unusable_cache_dir_is_one_line(tmp_path, settings):
    from memlens.embed import export_onnx, resolve_model
    from memlens.errors import ModelError

    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelError, match="cannot write the model cache"):
        export_onnx(resolve_model(settings.embedding), tmp_path / "file" / "onnx" / "model.onnx")


# -- files.py ------------------------------------------------------------------------------------


def test_private_dirs_and_files(tmp_path, umask022):
    make_private_dirs(tmp_path / "a" / "b")
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700
    write_private(tmp_path / "a" / "f", b"data")
    assert mode(tmp_path / "a" / "f") == 0o600 and (tmp_path / "a" / "f").read_bytes() == b"data"
    assert sorted(os.listdir(tmp_path / "a")) == ["b", "f"]


def test_read_file_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, fragment in (("/dev/zero", "character device"), (fifo, "FIFO"), (tmp_path, "directory"),
                           (tmp_path / "none", "no such file")):
        with pytest.raises(MemlensError, match=fragment) as exc:
            bounded(lambda: read_file(path, cap=1024, what="input"))
        assert str(path) in str(exc.value)


def test_read_file_caps_the_bytes_actually_read(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2049)
    with pytest.raises(MemlensError, match=f"{big}: larger than the 2 KiB limit"):
        read_file(big, cap=2048, what="input")
    assert read_file(big, cap=4096) == b"x" * 2049
    # /proc files say st_size 0 whatever they hold: the cap counts what is read
    with pytest.raises(MemlensError, match="larger than the 16 bytes limit"):
        read_file("/proc/self/status", cap=16)
