"""The real all-MiniLM-L6-v2: both backends agree, the weights are verified, nothing is online."""

import json
import shutil
import sys

import numpy as np
import pytest

from memlens.config import BUNDLED_SHA256, EmbeddingConfig
from memlens.embed import OnnxEmbedder, make_embedder, resolve_model, spin_entries, verified_sha256
from memlens.embed_st import SentenceTransformerEmbedder
from memlens.errors import ModelError

TEXTS = [
    "Callbacks must not block.",
    "Use a SingleThreadedExecutor by default; offload long work to a worker thread.",
    "x",
    "QoS depth 1 with TRANSIENT_LOCAL durability for latched state topics " * 40,  # > 256 tokens: truncated
    "Ünïcödé and emoji 🚀 are fine too.",
]


@pytest.fixture(scope="module")
def st_embedder(settings):
    spec = resolve_model(settings.embedding)
    return SentenceTransformerEmbedder(spec, verified_sha256(spec, settings.cache_dir))


def test_onnx_and_sentence_transformers_give_the_same_vectors(real_embedder, st_embedder):
    a = real_embedder.embed(TEXTS)
    b = st_embedder.embed(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384)
    assert np.abs(a - b).max() < 1e-5
    assert (a * b).sum(axis=1).min() >= 0.99999
    assert real_embedder.model_id == st_embedder.model_id == f"all-MiniLM-L6-v2@{BUNDLED_SHA256[:12]}"


def test_batching_and_padding_do_not_change_vectors(real_embedder):
    together = real_embedder.embed(TEXTS)
    alone = np.stack([real_embedder.embed([t])[0] for t in TEXTS])
    assert np.abs(together - alone).max() < 1e-5


def test_vectors_are_unit_length_and_meaningful(real_embedder):
    v = real_embedder.embed(
        ["callbacks must never block the executor", "blocking calls inside ROS callbacks", "a recipe for sourdough bread"]
    )
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_idle_workers_spin_briefly_and_the_vectors_do_not_depend_on_it(real_embedder):
    """ONNX Runtime's workers spin for the next operator of a run, 50 us at most (long spins took a core from other
    processes embedding beside; none made every small operator wake a sleeping worker). The same vectors either way."""
    import onnxruntime as ort

    opts = real_embedder._session.get_session_options()
    for key, value in spin_entries(ort.__version__).items():
        assert opts.get_session_config_entry(key) == value
    assert spin_entries("1.32.0") == {"session.intra_op.allow_spinning": "1", "session.intra_op.spin_duration_us": "50"}
    # a runtime that would ignore the bound spins as long as it likes: there the workers do not spin at all
    assert spin_entries("1.26.1") == spin_entries("1.17.0") == spin_entries("1.x") == {"session.intra_op.allow_spinning": "0"}
    texts = ["Where are a node's parameters declared?", "fs.readFile reads a whole file into memory " * 20]
    spun = real_embedder.embed(texts)
    sleeping = ort.SessionOptions()
    sleeping.add_session_config_entry("session.intra_op.allow_spinning", "0")
    other = OnnxEmbedder(real_embedder.spec, real_embedder.sha, real_embedder.cache_dir)
    other._session = ort.InferenceSession(str(real_embedder.onnx_path), sleeping, providers=["CPUExecutionProvider"])
    assert np.array_equal(other.embed(texts), spun)


def test_onnx_graph_is_cached_under_the_weights_hash(real_embedder):
    assert real_embedder.onnx_path.is_file()
    assert BUNDLED_SHA256[:24] in str(real_embedder.onnx_path)
    assert real_embedder.onnx_path.stat().st_mode & 0o777 == 0o600


def test_texts_of_every_length_in_one_call(real_embedder):
    """Runs group texts by token count: a call mixing lengths (and repeats) gives each text its own vector."""
    texts = [" ".join(["word"] * n) for n in (1, 3, 3, 250, 400, 3, 1)]
    got = real_embedder.embed(texts)
    for i, t in enumerate(texts):
        assert np.abs(got[i] - real_embedder.embed([t])[0]).max() < 1e-5
    assert np.abs(got[1] - got[2]).max() == 0 and np.abs(got[3] - got[4]).max() > 1e-3  # 400 words: cut at 256 tokens


def test_token_count_uses_the_model_tokenizer(real_embedder):
    assert real_embedder.count_tokens("") == 0
    assert real_embedder.count_tokens("callbacks") == 2  # wordpiece: call ##backs
    assert real_embedder.count_tokens("word " * 300) == 300  # counting never truncates


def test_missing_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match="not a directory"):
        make_embedder(EmbeddingConfig(model=str(tmp_path / "nope")), tmp_path)


def test_corrupted_weights_are_detected(tmp_path, settings):
    src = resolve_model(settings.embedding).path
    copy = tmp_path / "model"
    shutil.copytree(src, copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    cfg = EmbeddingConfig(model=str(copy), sha256=BUNDLED_SHA256)
    with pytest.raises(ModelError, match="corrupted: sha256"):
        make_embedder(cfg, tmp_path / "cache")


def test_corruption_after_verification_is_caught(tmp_path, settings):
    """The verification stamp is keyed by size/mtime/inode: an edited file is re-hashed."""
    src = resolve_model(settings.embedding).path
    copy = tmp_path / "model"
    shutil.copytree(src, copy)
    cfg = EmbeddingConfig(model=str(copy), sha256=BUNDLED_SHA256)
    make_embedder(cfg, tmp_path / "cache")  # verified and stamped
    with open(copy / "model.safetensors", "r+b") as fh:
        fh.seek(1000)
        fh.write(b"\x00\x01\x02\x03")
    with pytest.raises(ModelError, match="corrupted"):
        make_embedder(cfg, tmp_path / "cache")


def test_unusable_cached_onnx_file_is_built_again(tmp_path, settings, real_embedder):
    emb = make_embedder(settings.embedding, tmp_path)
    assert isinstance(emb, OnnxEmbedder)
    emb.onnx_path.parent.mkdir(parents=True)
    emb.onnx_path.write_bytes(b"not an onnx graph")
    emb.load()
    assert emb.onnx_path.stat().st_size > 1_000_000 and emb.onnx_path.stat().st_mode & 0o777 == 0o600
    assert np.abs(emb.embed(TEXTS[:2]) - real_embedder.embed(TEXTS[:2])).max() < 1e-6


def _model_copy(tmp_path, settings, **config):
    copy = tmp_path / "model"
    shutil.copytree(resolve_model(settings.embedding).path, copy)
    cfg = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**cfg, **config}))
    return copy


def test_a_model_the_graph_cannot_reproduce_names_the_other_backend(tmp_path, settings):
    copy = _model_copy(tmp_path, settings, model_type="roberta")
    with pytest.raises(ModelError, match=r"model_type 'roberta'.*memlens\[sentence-transformers\]") as exc:
        make_embedder(EmbeddingConfig(model=str(copy)), tmp_path / "cache")
    assert "\n" not in str(exc.value)


def test_the_sentence_transformers_backend_without_its_extra_is_one_line(tmp_path, settings, monkeypatch):
    from memlens.retrieval.rerank import load_cross_encoder

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if the extra were not installed
    emb = make_embedder(EmbeddingConfig(backend="sentence-transformers"), tmp_path)
    for call in (emb.load, lambda: load_cross_encoder(str(tmp_path))):
        with pytest.raises(ModelError, match=r"optional extra sentence-transformers.*'memlens\[sentence-transformers\]'"):
            call()
