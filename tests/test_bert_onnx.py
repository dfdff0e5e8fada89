"""The ONNX graph memlens writes from BERT weights: a valid ONNX file, the same numbers as transformers' BertModel.

A small BERT with random weights (built here with transformers, saved as safetensors
the way sentence-transformers models are) is written as a graph by memlens.bert_onnx,
checked by the ``onnx`` package's own checker, and run by ONNX Runtime against torch's
mean-pooled, normalised output. The bundled model's equivalence with
sentence-transformers is tests/test_embed_equivalence.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from memlens.bert_onnx import _varint, build_graph, read_safetensors
from memlens.errors import ModelError


def _tiny_bert(path, *, head: bool = False, seed: int = 0):
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=64)
    model = (BertForSequenceClassification if head else BertModel)(cfg).eval()
    model.save_pretrained(path, safe_serialization=True)
    return model.bert if head else model


def _reference(model, ids: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        hidden = model(input_ids=torch.from_numpy(ids)).last_hidden_state.mean(dim=1)
        return torch.nn.functional.normalize(hidden, dim=-1).numpy()


def _session(chunks: list[bytes]):
    import onnxruntime as ort

    return ort.InferenceSession(b"".join(chunks), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("head", [False, True], ids=["encoder", "saved-with-a-head"])
def test_graph_equals_transformers_bert(tmp_path, head):
    model = _tiny_bert(tmp_path, head=head)
    chunks = build_graph(tmp_path, tmp_path / "model.safetensors")
    session = _session(chunks)
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 1), (3, 7), (2, 64)):
        ids = rng.integers(0, 120, size=(batch, seq), dtype=np.int64)
        got = session.run(None, {"input_ids": ids})[0]
        assert got.shape == (batch, 32)
        np.testing.assert_allclose(got, _reference(model, ids), atol=2e-6)


def test_the_file_is_valid_onnx(tmp_path):
    import onnx

    _tiny_bert(tmp_path)
    proto = onnx.load_from_string(b"".join(build_graph(tmp_path, tmp_path / "model.safetensors")))
    onnx.checker.check_model(proto, full_check=True)
    assert [i.name for i in proto.graph.input] == ["input_ids"]
    assert [o.name for o in proto.graph.output] == ["sentence_embedding"]
    assert {(o.domain, o.version) for o in proto.opset_import} == {("", 17), ("com.microsoft", 1)}
    assert {n.op_type for n in proto.graph.node} >= {"Attention", "SkipLayerNormalization", "BiasGelu", "ReduceMean"}


def test_varints_are_protobufs():
    from google.protobuf.internal.encoder import _VarintBytes  # the reference encoder ONNX Runtime's protobuf ships

    for n in (0, 1, 127, 128, 300, 2**31, 2**63 - 1):
        assert _varint(n) == _VarintBytes(n)
    assert _varint(-1) == _VarintBytes((1 << 64) - 1)  # int64 -1: ten bytes, two's complement


def test_models_it_cannot_reproduce_are_refused(tmp_path):
    _tiny_bert(tmp_path)
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    with pytest.raises(ModelError, match=r"pooling \['pooling_mode_cls_token'\].*sentence-transformers"):
        build_graph(tmp_path, tmp_path / "model.safetensors")


def test_broken_weights_are_one_line(tmp_path):
    _tiny_bert(tmp_path)
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    for bad in (b"", data[:100], (10**9).to_bytes(8, "little") + data[8:], data[: len(data) // 2]):
        weights.write_bytes(bad)
        with pytest.raises(ModelError) as exc:
            read_safetensors(weights)
        assert "\n" not in str(exc.value) and "safetensors" in str(exc.value)
