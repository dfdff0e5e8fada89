"""A BERT sentence encoder written as an ONNX graph from its safetensors weights, without torch.

The graph is what sentence-transformers computes for all-MiniLM-L6-v2 and models
like it (a BERT encoder, mean pooling, L2 normalisation), in the operators ONNX
Runtime runs fastest on a CPU: its fused ``Attention``, ``SkipLayerNormalization``
and ``BiasGelu`` kernels (com.microsoft domain) around plain ``MatMul``s, and the
pooling inside the graph. There is no attention mask: the embedder feeds texts of
one token length per run, so no position is padding, and ONNX Runtime can use its
fused attention (it falls back to an unfused one when a mask is given). The
vectors equal sentence-transformers' (tests/test_embed_equivalence.py).

The file is written by a small protobuf encoder of the few ONNX messages it needs
(the ``onnx`` package would add 30 MB to every install for a one-time step); the
field numbers are those of onnx.proto, and tests/test_bert_onnx.py checks the bytes
with the ``onnx`` package's own checker.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from memlens.errors import ModelError
from memlens.files import CONFIG_MAX_BYTES, read_file

GRAPH_VERSION = 1  # part of the cached file's name: a changed graph is built anew, never read stale
_HEADER_MAX = 16 << 20  # a safetensors JSON header; all-MiniLM-L6-v2's is 13 KB
_ST_MODULES = {"Transformer", "Pooling", "Normalize"}  # sentence-transformers modules the graph reproduces

# -- protobuf: the wire format for the few ONNX messages written here ------------------------------

_FLOAT, _INT32, _INT64 = 1, 6, 7  # TensorProto.DataType
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7  # AttributeProto.AttributeType


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 fields: negative numbers as their two's complement
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


class _Msg:
    """A message as a list of byte chunks, so that large tensors are never joined into one copy."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def _add(self, *parts: bytes) -> _Msg:
        for p in parts:
            self.chunks.append(p)
            self.size += len(p)
        return self

    def num(self, field: int, value: int) -> _Msg:
        return self._add(_varint(field << 3), _varint(value))

    def f32(self, field: int, value: float) -> _Msg:
        return self._add(_varint(field << 3 | 5), struct.pack("<f", value))

    def raw(self, field: int, value: bytes | str) -> _Msg:
        data = value.encode() if isinstance(value, str) else value
        return self._add(_varint(field << 3 | 2), _varint(len(data)), data)

    def sub(self, field: int, sub: _Msg) -> _Msg:
        self._add(_varint(field << 3 | 2), _varint(sub.size))
        self.chunks.extend(sub.chunks)
        self.size += sub.size
        return self


def _tensor(name: str, arr: np.ndarray) -> _Msg:
    dtype = {np.dtype(np.float32): _FLOAT, np.dtype(np.int64): _INT64}[arr.dtype]
    t = _Msg()
    for d in arr.shape:
        t.num(1, d)
    return t.num(2, dtype).raw(8, name).raw(9, np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes())


def _value_info(name: str, elem: int, dims: Iterable[int | str]) -> _Msg:
    shape = _Msg()
    for d in dims:
        shape.sub(1, _Msg().num(1, d) if isinstance(d, int) else _Msg().raw(2, d))
    return _Msg().raw(1, name).sub(2, _Msg().sub(1, _Msg().num(1, elem).sub(2, shape)))


def _node(op: str, inputs: list[str], outputs: list[str], domain: str = "", **attrs: float | int | list[int]) -> _Msg:
    n = _Msg()
    for i in inputs:
        n.raw(1, i)
    for o in outputs:
        n.raw(2, o)
    n.raw(4, op)
    for key, value in sorted(attrs.items()):
        a = _Msg().raw(1, key)
        if isinstance(value, float):
            a.f32(2, value).num(20, _ATTR_FLOAT)
        elif isinstance(value, int):
            a.num(3, value).num(20, _ATTR_INT)
        else:
            for v in value:
                a.num(8, v)
            a.num(20, _ATTR_INTS)
        n.sub(5, a)
    if domain:
        n.raw(7, domain)
    return n


# -- weights ---------------------------------------------------------------------------------------

_DTYPES: dict[str, np.dtype[Any]] = {
    "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "I64": np.dtype("<i8"),
}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The float tensors of a safetensors file, as float32 arrays (read-only views where they can be)."""
    try:
        with path.open("rb") as fh:
            data = memoryview(fh.read())
    except OSError as exc:
        raise ModelError(f"cannot read the model weights {path}: {exc.strerror or exc}") from None
    try:
        (n,) = struct.unpack("<Q", data[:8])
        if not 2 <= n <= min(_HEADER_MAX, len(data) - 8):
            raise ValueError(f"header of {n} bytes")
        header = json.loads(bytes(data[8 : 8 + n]))
        base, out = 8 + n, {}
        for key, info in header.items():
            if key == "__metadata__":
                continue
            dtype = _DTYPES.get(info["dtype"])
            if dtype is None or dtype.kind == "i":
                continue  # integer buffers (position ids) are not weights
            start, end = (base + int(x) for x in info["data_offsets"])
            shape = [int(d) for d in info["shape"]]
            if not base <= start <= end <= len(data) or end - start != dtype.itemsize * int(np.prod(shape)):
                raise ValueError(f"tensor {key} lies outside the file")
            arr = np.frombuffer(data[start:end], dtype=dtype).reshape(shape)
            if info["dtype"] == "BF16":
                arr = (arr.astype(np.uint32) << 16).view(np.float32)
            out[key] = arr.astype(np.float32, copy=False)
        return out
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise ModelError(f"embedding model weights {path} are not a safetensors file ({exc})") from None


def _config(model_dir: Path, name: str) -> Any:
    return json.loads(read_file(model_dir / name, cap=CONFIG_MAX_BYTES, what="model config"))


def check_supported(model_dir: Path) -> dict[str, Any]:
    """The model's config when the graph can reproduce it; a one-line ModelError naming the mismatch otherwise."""
    hint = "use embedding.backend = 'sentence-transformers' (pip install 'memlens[sentence-transformers]')"
    cfg = _config(model_dir, "config.json")
    problems = []
    if cfg.get("model_type") != "bert":
        problems.append(f"model_type {cfg.get('model_type')!r} is not 'bert'")
    if cfg.get("hidden_act", "gelu") != "gelu":
        problems.append(f"activation {cfg.get('hidden_act')!r}")
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        problems.append(f"{cfg.get('position_embedding_type')!r} position embeddings")
    if (model_dir / "modules.json").is_file():
        kinds = {str(m.get("type", "")).rsplit(".", 1)[-1] for m in _config(model_dir, "modules.json")}
        if not kinds <= _ST_MODULES:
            problems.append(f"sentence-transformers modules {sorted(kinds - _ST_MODULES)}")
    pooling = model_dir / "1_Pooling" / "config.json"
    if pooling.is_file():
        modes = {k for k, v in _config(model_dir, "1_Pooling/config.json").items() if k.startswith("pooling_mode") and v}
        if modes != {"pooling_mode_mean_tokens"}:
            problems.append(f"pooling {sorted(modes)} (only mean pooling is built)")
    if problems:
        raise ModelError(f"embedding model at {model_dir} cannot run on ONNX Runtime here: {'; '.join(problems)}; {hint}")
    return dict(cfg)


# -- the graph -------------------------------------------------------------------------------------


def build_graph(model_dir: Path, weights: Path) -> list[bytes]:
    """The serialised ONNX model (as chunks): input ``input_ids`` [batch, seq], output ``sentence_embedding`` [batch, dim]."""
    cfg = check_supported(model_dir)
    w = read_safetensors(weights)
    if "bert.embeddings.word_embeddings.weight" in w:  # saved from a BertFor... head: the encoder's keys are prefixed
        w = {k.removeprefix("bert."): v for k, v in w.items()}
    try:
        return _encoder(cfg, w)
    except (KeyError, ValueError) as exc:
        raise ModelError(f"embedding model weights {weights} do not fit its config.json ({exc})") from None


def _encoder(cfg: dict[str, Any], w: dict[str, np.ndarray]) -> list[bytes]:
    hidden, heads, layers = int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"])
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    if hidden % heads:
        raise ValueError(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    graph = _Msg()
    inits = _Msg()  # kept apart: GraphProto wants nodes (1), name (2), initializers (5), inputs (11), outputs (12)

    def init(name: str, arr: np.ndarray) -> str:
        inits.sub(5, _tensor(name, arr))
        return name

    def node(op: str, inputs: list[str], out: str, domain: str = "", **attrs: float | int | list[int]) -> str:
        graph.sub(1, _node(op, inputs, [out], domain, **attrs))
        return out

    def dense(prefix: str) -> tuple[np.ndarray, np.ndarray]:
        return w[f"{prefix}.weight"].T, w[f"{prefix}.bias"]  # torch's Linear keeps [out, in]

    e = "embeddings."
    word = init("word_embeddings", w[e + "word_embeddings.weight"])
    # token type ids are all 0 for a single text: that row is folded into the position table
    pos = init("positions", w[e + "position_embeddings.weight"] + w[e + "token_type_embeddings.weight"][0])
    init("one", np.array([1], np.int64))
    init("two", np.array([2], np.int64))
    init("zero", np.array([0], np.int64))
    init("last_axis", np.array([-1], np.int64))
    init("norm_floor", np.array(1e-12, np.float32))
    seq = node("Slice", [node("Shape", ["input_ids"], "shape"), "one", "two"], "seq_len")
    x = node("Add", [node("Gather", [word, "input_ids"], "word"), node("Slice", [pos, "zero", seq], "pos")], "emb_sum")
    x = node("LayerNormalization", [x, init("emb_ln_g", w[e + "LayerNorm.weight"]), init("emb_ln_b", w[e + "LayerNorm.bias"])],
             "emb", axis=-1, epsilon=eps)
    ms = "com.microsoft"
    for i in range(layers):
        p = f"encoder.layer.{i}."
        qkv = [dense(p + f"attention.self.{n}") for n in ("query", "key", "value")]
        w_qkv = init(f"l{i}_qkv_w", np.concatenate([m for m, _ in qkv], axis=1))
        b_qkv = init(f"l{i}_qkv_b", np.concatenate([b for _, b in qkv]))
        ctx = node("Attention", [x, w_qkv, b_qkv], f"l{i}_ctx", ms, num_heads=heads)
        wo, bo = dense(p + "attention.output.dense")
        ao = node("MatMul", [ctx, init(f"l{i}_ao_w", wo)], f"l{i}_ao")
        x1 = node("SkipLayerNormalization", [ao, x, init(f"l{i}_ln1_g", w[p + "attention.output.LayerNorm.weight"]),
                                             init(f"l{i}_ln1_b", w[p + "attention.output.LayerNorm.bias"]),
                                             init(f"l{i}_ao_b", bo)], f"l{i}_x1", ms, epsilon=eps)
        wi, bi = dense(p + "intermediate.dense")
        h = node("BiasGelu", [node("MatMul", [x1, init(f"l{i}_in_w", wi)], f"l{i}_in"), init(f"l{i}_in_b", bi)], f"l{i}_gelu", ms)
        wo2, bo2 = dense(p + "output.dense")
        o = node("MatMul", [h, init(f"l{i}_out_w", wo2)], f"l{i}_out")
        x = node("SkipLayerNormalization", [o, x1, init(f"l{i}_ln2_g", w[p + "output.LayerNorm.weight"]),
                                            init(f"l{i}_ln2_b", w[p + "output.LayerNorm.bias"]),
                                            init(f"l{i}_out_b", bo2)], f"l{i}_x2", ms, epsilon=eps)
    # mean over the tokens (no padding: every position counts), then L2, as sentence-transformers' Pooling + Normalize
    pooled = node("ReduceMean", [x], "pooled", axes=[1], keepdims=0)
    sq = node("ReduceSum", [node("Mul", [pooled, pooled], "squares"), "last_axis"], "sum_squares", keepdims=1)
    norm = node("Max", [node("Sqrt", [sq], "norm0"), "norm_floor"], "norm")
    node("Div", [pooled, norm], "sentence_embedding")
    graph.raw(2, "sentence_encoder")
    return _model(graph, inits, hidden)


def _model(g: _Msg, inits: _Msg, hidden: int) -> list[bytes]:
    g.chunks.extend(inits.chunks)
    g.size += inits.size
    g.sub(11, _value_info("input_ids", _INT64, ["batch", "seq"]))
    g.sub(12, _value_info("sentence_embedding", _FLOAT, ["batch", hidden]))
    model = _Msg().num(1, 8).raw(2, "memlens").sub(7, g)
    model.sub(8, _Msg().raw(1, "").num(2, 17))
    model.sub(8, _Msg().raw(1, "com.microsoft").num(2, 1))
    return model.chunks
