"""Settings are checked when they load: every value in range, every path usable, every source named."""

import pytest

from memlens.config import KNN_MAX_ROWS, load_settings
from memlens.errors import MemlensError

from .conftest import run_cli


@pytest.fixture
def config(tmp_path, monkeypatch):
    """Write a config file, point MEMLENS_CONFIG at it, return the loader's one-line error (or None)."""
    path = tmp_path / "config.toml"
    monkeypatch.setenv("MEMLENS_CONFIG", str(path))
    monkeypatch.delenv("MEMLENS_CACHE_DIR")  # the variable would override the file's cache_dir

    def load(text: str) -> str | None:
        path.write_text(text)
        try:
            load_settings()
        except MemlensError as exc:
            msg = str(exc)
            assert "\n" not in msg
            return msg
        return None

    load.path = path
    return load


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("[embedding]\nbatch_size = 0\n", ["embedding.batch_size = 0", "allowed from 1 to 4096"]),
        ("[embedding]\nmax_tokens = -3\n", ["embedding.max_tokens", "allowed from 1 to"]),
        ("[embedding]\nthreads = -1\n", ["embedding.threads", "allowed from 0 to"]),
        ("[embedding]\nsha256 = 'abc'\n", ["embedding.sha256"]),
        ("[cache]\nmax_entries = -1\n", ["cache.max_entries = -1", "allowed from 0 to"]),
        ("[cache]\nttl_seconds = inf\n", ["cache.ttl_seconds", "finite"]),
        ("[cache]\nttl_seconds = -1.0\n", ["cache.ttl_seconds", "allowed from 0 to"]),
        ("[working_memory]\nwindow = 99999999999999999999\n", ["working_memory.window", "allowed from 0 to 1000"]),
        ("[working_memory]\nmax_tasks = 0\n", ["working_memory.max_tasks", "allowed from 1 to"]),
        (f"[search]\ncandidates = {KNN_MAX_ROWS + 1}\n", ["search.candidates", f"allowed from 1 to {KNN_MAX_ROWS}"]),
        ("[search]\nk = 0\n", ["search.k = 0", "allowed from 1 to"]),
        ("[search]\nk = 2000\n", ["search.k = 2000"]),  # 3 * k would be over sqlite-vec's KNN row limit
        ("[search]\nvector_weight = nan\n", ["search.vector_weight", "finite"]),
        ("[search]\nlexical_weight = -0.5\n", ["search.lexical_weight", "allowed from 0 to"]),
        ('[search]\nvector_index = "memory"\n', ["search.vector_index", "'auto' or 'sqlite-vec'", "got 'memory'"]),
        ("[storage]\nbusy_timeout_ms = -1\n", ["storage.busy_timeout_ms"]),
        ("[storage]\nmmap_size = 99999999999999999999\n", ["storage.mmap_size"]),
        ('[storage]\nsynchronous = "off"\n', ["storage.synchronous", "'normal' or 'full'", "got 'off'"]),
        ("[retrieval]\nhalf_life_days = inf\n", ["retrieval.half_life_days", "finite"]),
        ("[retrieval]\nactive_wing_boost = -1\n", ["retrieval.active_wing_boost"]),
        ("[retrieval]\ndedup_similarity = 1.5\n", ["retrieval.dedup_similarity", "allowed from 0 to 1"]),
        ("[retrieval]\nconflict_similarity = -0.1\n", ["retrieval.conflict_similarity", "allowed from 0 to 1"]),
        ("[retrieval.weights]\nrelevance = -1\n", ["retrieval.weights", "'relevance'", "from 0 to"]),
        ("[retrieval.weights]\nrecency = nan\n", ["retrieval.weights.recency", "finite"]),
        ("[retrieval.weights]\nfreshness = 1\n", ["unknown weight 'freshness'"]),
        ("[rerank]\ntop_n = 0\n", ["rerank.top_n"]),
        ("[limits]\nmax_entry_chars = 0\n", ["limits.max_entry_chars = 0", "allowed from 1 to 10000000"]),
        ("[limits]\nmax_entry_chars = -5\n", ["limits.max_entry_chars = -5"]),
        ("[limits]\nmax_entry_chars = 99999999999999999999\n", ["limits.max_entry_chars"]),
        ("[serach]\nk = 3\n", ["unknown setting serach"]),
        ("[search]\ncandidate = 3\n", ["unknown setting search.candidate"]),
        ('cache_dir = "/dev/null"\n', ["cache_dir", "/dev/null"]),
        ('cache_dir = "/proc/1"\n', ["cache_dir", "/proc/1", "pseudo-filesystem"]),
        ('cache_dir = ""\n', ["cache_dir", "empty"]),
        ("store = 5\n", ["configuration: store: input should be a valid string, got 5"]),  # not "store.str"
        # a file's values have TOML types: a switch or a string where a number goes is refused, never converted
        ("[search]\nk = true\n", ["configuration: search.k: expected a whole number, got true (in "]),
        ('[search]\nk = "5"\n', ["search.k: expected a whole number, got '5'"]),
        ('[cache]\nenabled = "yes"\n', ["cache.enabled: expected true or false, got 'yes'"]),
        ("[retrieval.weights]\nrelevance = true\n", ["retrieval.weights.relevance: expected a number, got true"]),
        ("[profiles.mine]\ncap = true\n", ["profiles.mine.cap: expected a whole number, got true"]),
        ("[profiles.academic]\ncap = 0\n", ["profiles.academic.cap = 0", "allowed from 1 to"]),
        ("[profiles.mine]\nrelative = 2\n", ["profiles.mine.relative", "allowed from 0 to 1"]),
        ("[profiles.mine]\nkinds = ['facts']\n", ["profiles.mine.kinds", "unknown kind 'facts'"]),
        ("[profiles.mine]\nmin_score = nan\n", ["profiles.mine.min_score", "finite"]),
        ("[profiles.mine]\nweights = {relevance = -2}\n", ["profiles.mine.weights"]),
        ("[profiles.conversation]\nconversation_fusion = {raw = inf}\n", ["profiles.conversation.conversation_fusion"]),
        ("[profiles.mine]\ncpa = 3\n", ["unknown setting profiles.mine.cpa"]),
        ("[profiles]\nmine = 3\n", ["profiles.mine: expected a table ([profiles.mine] and its keys on the lines below), got 3"]),
        # a table given a plain value says so in the file's words, not pydantic's class names (SearchConfig)
        ("search = 3\n", ["configuration: search: expected a table ([search] and its keys on the lines below), got 3"]),
        ("[retrieval]\nweights = 3\n", ["retrieval.weights: expected a table ([retrieval.weights] and its keys"]),
        ("[web.providers]\nbrave = 1\n", ["web.providers.brave: expected a table ([web.providers.brave] and its keys"]),
    ],
)
def test_out_of_range_values_are_refused_when_settings_load(config, text, fragments):
    msg = config(text)
    assert msg is not None, f"accepted: {text!r}"
    assert msg.startswith("configuration")
    for f in fragments:
        assert f in msg, msg
    assert str(config.path) in msg  # where the value came from


def test_values_inside_the_bounds_load(config, tmp_path):
    assert config(
        f'cache_dir = "{tmp_path / "new" / "cache"}"\n'
        "[search]\ncandidates = 4096\nk = 1000\nvector_weight = 0\n[cache]\nmax_entries = 0\nttl_seconds = 0\n"
        "[working_memory]\nwindow = 0\n[retrieval]\nhalf_life_days = 0\n[retrieval.weights]\nrecency = 0.5\n"
        f'[profiles.mine]\nkinds = ["fact"]\ncap = 3\n[embedding]\nsha256 = "{"A" * 64}"\n'
    ) is None
    assert not (tmp_path / "new").exists()  # checking a path creates nothing


def test_a_cache_dir_under_a_file_is_refused(config, tmp_path):
    (tmp_path / "afile").write_text("x")
    msg = config(f'cache_dir = "{tmp_path / "afile" / "cache"}"\n')
    assert msg and "is a regular file, not a directory" in msg


def test_missing_config_file_named_by_the_variable_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLENS_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(MemlensError, match="nope.toml.*MEMLENS_CONFIG.*no such file"):
        load_settings()
    monkeypatch.setenv("MEMLENS_CONFIG", "/dev/null")  # explicitly no file: defaults
    assert load_settings().search.k == 10


@pytest.mark.parametrize("target", ["/dev/zero", "dir", "fifo"])
def test_config_file_must_be_a_regular_file(tmp_path, monkeypatch, target):
    import os

    path = {"/dev/zero": "/dev/zero", "dir": str(tmp_path), "fifo": str(tmp_path / "cfg.fifo")}[target]
    if target == "fifo":
        os.mkfifo(path)
    monkeypatch.setenv("MEMLENS_CONFIG", path)
    with pytest.raises(MemlensError, match="not a regular file"):
        load_settings()


def test_config_file_may_start_with_a_byte_order_mark(config):
    """A BOM an editor wrote is dropped, as import drops it (it was 'invalid TOML: Invalid statement (at line 1,
    column 1)', nothing on that line looking wrong)."""
    config.path.write_bytes(b"\xef\xbb\xbf[search]\nk = 2\n")
    assert load_settings().search.k == 2
    assert "search.k = 0" in config("\ufeff[search]\nk = 0\n")  # the file's values are still checked


def test_oversized_config_file_is_refused(config):
    msg = config("# padding\n" * 200_000)
    assert msg and "larger than the 1 MiB limit" in msg


def test_environment_errors_name_the_variable(monkeypatch):
    monkeypatch.setenv("MEMLENS_SEARCH", "notjson")
    with pytest.raises(MemlensError) as exc:
        load_settings()
    assert "MEMLENS_SEARCH" in str(exc.value) and "config.toml" not in str(exc.value)
    monkeypatch.setenv("MEMLENS_SEARCH", '{"k": 0}')
    with pytest.raises(MemlensError, match=r"search.k = 0 .*allowed from 1 to .*MEMLENS_SEARCH\b"):
        load_settings()
    monkeypatch.delenv("MEMLENS_SEARCH")
    monkeypatch.setenv("MEMLENS_SEARCH__CANDIDATES", "99999")
    with pytest.raises(MemlensError, match="MEMLENS_SEARCH__CANDIDATES"):
        load_settings()
    monkeypatch.delenv("MEMLENS_SEARCH__CANDIDATES")
    monkeypatch.setenv("MEMLENS_CACHE_DIR", "/dev/null")
    with pytest.raises(MemlensError, match="MEMLENS_CACHE_DIR"):
        load_settings()
    monkeypatch.delenv("MEMLENS_CACHE_DIR")
    monkeypatch.setenv("MEMLENS_MCP__ALLOWED_HOSTS", "memory.internal")  # a list, not written as JSON
    with pytest.raises(MemlensError) as exc:
        load_settings()
    assert str(exc.value) == ("configuration: environment variable MEMLENS_MCP__ALLOWED_HOSTS: mcp.allowed_hosts is a "
                              "list, written as JSON: for example MEMLENS_MCP__ALLOWED_HOSTS='[\"a\", \"b\"]'")
    monkeypatch.setenv("MEMLENS_MCP__ALLOWED_HOSTS", '["memory.internal"]')
    assert load_settings().mcp.allowed_hosts == ["memory.internal"]


def test_a_mistyped_variable_is_an_error_or_a_warning_never_silence(monkeypatch, capsys):
    """MEMLENS_SERACH__K names a table that does not exist: an error, as an unknown table of the file is. MEMLENS_SEARCH_K
    (one underscore) is a name memlens does not read, perhaps another program's: a warning naming the closest
    setting. Both used to be ignored without a word."""
    from memlens.cli.main import main

    monkeypatch.setenv("MEMLENS_SERACH__K", "0")
    with pytest.raises(MemlensError) as exc:
        load_settings()
    assert str(exc.value) == ("configuration: unknown setting serach.k (from environment variable MEMLENS_SERACH__K; "
                              "did you mean MEMLENS_SEARCH__K?)")
    assert main(["profiles"]) == 2
    assert capsys.readouterr().err == f"memlens: error: {exc.value}\n"
    monkeypatch.delenv("MEMLENS_SERACH__K")
    monkeypatch.setenv("MEMLENS_SEARCH_K", "0")
    monkeypatch.setenv("MEMLENS_NOTHING_LIKE_IT", "1")
    for other in ("MEMLENS_TOKEN", "MEMLENS_MCP_EARLY_INIT", "MEMLENS_SEARCH__K"):  # read, documented, or a setting
        monkeypatch.setenv(other, "3")
    assert load_settings().search.k == 3
    assert main(["profiles"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "memlens: warning: environment variable MEMLENS_NOTHING_LIKE_IT is not a memlens setting and is ignored",
        "memlens: warning: environment variable MEMLENS_SEARCH_K is not a memlens setting and is ignored "
        "(did you mean MEMLENS_SEARCH__K?)"]


def test_the_variables_the_warning_lets_through_are_ones_memlens_reads_or_its_readmes_name():
    """A MEMLENS_* name let through unwarned must be one the engine reads or the READMEs tell a user to set. A test's
    and a benchmark's variables used to be let through (memlens never reads them); they are named without the prefix
    now."""
    import re
    from pathlib import Path

    from memlens.config_source import OTHER_VARIABLES

    root = Path(__file__).resolve().parents[1]
    engine = re.sub(r"OTHER_VARIABLES = frozenset\(\{.*?\}\)", "", "\n".join(
        p.read_text(encoding="utf-8") for p in sorted((root / "core").rglob("*.py"))), flags=re.S)
    readmes = "\n".join((root / name).read_text(encoding="utf-8") for name in ("README.md", "core/README.md"))
    assert sorted(v for v in OTHER_VARIABLES if v not in engine and v not in readmes) == []


def test_cli_prints_one_line_for_a_bad_setting(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[embedding]\nbatch_size = 0\n")
    proc = run_cli("--store", str(tmp_path / "x.db"), "stats", env={"MEMLENS_CONFIG": str(cfg)}, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "embedding.batch_size = 0" in lines[0] and "allowed from 1 to 4096" in lines[0]
    assert not (tmp_path / "x.db").exists()
    proc = run_cli("--store", str(tmp_path / "x.db"), "stats", env={"MEMLENS_SEARCH": "notjson"}, timeout=60)
    assert proc.returncode == 2 and "MEMLENS_SEARCH" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
