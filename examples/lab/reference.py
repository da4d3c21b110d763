"""Float64 numpy forward passes of the lab's two real models with one head changed, so
the browser test can check "propagate" against a computation that shares no code with
the crate: the checkpoint files are read here (safetensors and GGUF, parsed by hand),
the layers are written from the architectures' definitions, and the changed head's
weights are rebuilt from its own q and k under the page's switches.

Only numpy is needed (`pip install numpy`).
"""

import json
import math
import struct

import numpy as np


# --- checkpoint readers -------------------------------------------------------------

def read_safetensors(path):
    """name -> float64 array for every F32 tensor (8-byte header length, JSON header,
    raw little-endian data)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out


_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _Cursor:
    def __init__(self, buf):
        self.buf, self.at = buf, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.at)[0]
        self.at += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.buf[self.at:self.at + n].decode("utf-8", "replace")
        self.at += n
        return s

    def value(self, ty):
        if ty in _SCALAR:
            return self.take(_SCALAR[ty])
        if ty == 8:
            return self.string()
        if ty == 9:
            inner, n = self.take("<I"), self.take("<Q")
            return [self.value(inner) for _ in range(n)]
        raise ValueError(f"GGUF value type {ty}")


def _dequantize(raw, ty, count):
    """GGML block layouts: F32 (0), F16 (1), Q4_0 (2), Q4_1 (3), Q8_0 (8)."""
    if ty == 0:
        return np.frombuffer(raw, dtype="<f4", count=count).astype(np.float64)
    if ty == 1:
        return np.frombuffer(raw, dtype="<f2", count=count).astype(np.float64)
    size = {2: 18, 3: 20, 8: 34}.get(ty)
    if size is None:
        raise ValueError(f"GGML type {ty} is not decoded here")
    b = np.frombuffer(raw, dtype=np.uint8, count=count // 32 * size).reshape(-1, size)
    d = b[:, 0:2].copy().view("<f2").astype(np.float64)
    if ty == 8:
        return (d * b[:, 2:34].copy().view(np.int8)).reshape(-1)
    qs = b[:, size - 16:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float64)
    if ty == 2:
        return (d * (q - 8)).reshape(-1)
    m = b[:, 2:4].copy().view("<f2").astype(np.float64)
    return (d * q + m).reshape(-1)


def read_gguf(path):
    """(metadata, name -> float64 array in numpy order) of a GGUF v2/v3 file."""
    with open(path, "rb") as f:
        buf = f.read()
    c = _Cursor(buf)
    if c.take("<I") != 0x46554747:
        raise ValueError(f"{path}: not a GGUF file")
    c.take("<I")
    tensors, kvs = c.take("<Q"), c.take("<Q")
    meta = {}
    for _ in range(kvs):
        key = c.string()
        meta[key] = c.value(c.take("<I"))
    infos = []
    for _ in range(tensors):
        name = c.string()
        dims = [c.take("<Q") for _ in range(c.take("<I"))]
        infos.append((name, dims, c.take("<I"), c.take("<Q")))
    align = int(meta.get("general.alignment", 32))
    base = (c.at + align - 1) // align * align
    weights = {}
    for name, dims, ty, offset in infos:
        count = int(np.prod(dims))
        w = _dequantize(memoryview(buf)[base + offset:], ty, count)
        weights[name] = w.reshape(tuple(reversed(dims)))
    return meta, weights


# --- the changed head ---------------------------------------------------------------

def whatif_weights(q, k, causal, scale):
    """softmax(scale * q kᵀ) of one head, (L, D) each, with the causal rule if asked."""
    s = scale * (q @ k.T)
    n = len(q)
    if causal:
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return s / s.sum(axis=-1, keepdims=True)


def _softmax_heads(q, k, causal):
    return np.stack([whatif_weights(qh, kh, causal, 1.0 / math.sqrt(q.shape[-1])) for qh, kh in zip(q, k)])


# --- BERT (MiniLM) ------------------------------------------------------------------

def _layer_norm(x, w, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


_ERF = np.vectorize(math.erf)


def bert_hidden(w, config, ids, patch=None):
    """The encoder's last hidden state (L, hidden). `patch = (layer, head, fn)`: at that
    layer the head's weights become `fn(q, k)` (its (L, D) query and key rows)."""
    eps = float(config["layer_norm_eps"])
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    dim = hidden // heads
    n = len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for layer in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{layer}."
        lin = lambda t, name: t @ w[p + name + ".weight"].T + w[p + name + ".bias"]
        split = lambda t: t.reshape(n, heads, dim).transpose(1, 0, 2)
        q = split(lin(x, "attention.self.query"))
        k = split(lin(x, "attention.self.key"))
        v = split(lin(x, "attention.self.value"))
        probs = _softmax_heads(q, k, False)
        if patch and patch[0] == layer:
            probs[patch[1]] = patch[2](q[patch[1]], k[patch[1]])
        ctx = (probs @ v).transpose(1, 0, 2).reshape(n, hidden)
        x = _layer_norm(x + lin(ctx, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"], eps)
        t = lin(x, "intermediate.dense")
        f = lin(0.5 * t * (1.0 + _ERF(t / math.sqrt(2.0))), "output.dense")
        x = _layer_norm(x + f, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return x


# --- llama (SmolLM2) ----------------------------------------------------------------

def _unpermute(wt, n_head):
    # llama.cpp's converter stores each head's q and k rows in adjacent-pairs order:
    # GGUF row 2r + a is Hugging Face row a * D/2 + r. Undo it and rotate halves.
    out_dim, in_dim = wt.shape
    d = out_dim // n_head
    return wt.reshape(n_head, d // 2, 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


def _rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def llama_hidden(meta, w, ids, patch=None):
    """The decoder's hidden state after its final norm (L, hidden); `patch` as for BERT
    (the head's keys are its key/value group's)."""
    arch = meta["general.architecture"]
    layers, hidden = int(meta[f"{arch}.block_count"]), int(meta[f"{arch}.embedding_length"])
    H, KV = int(meta[f"{arch}.attention.head_count"]), int(meta[f"{arch}.attention.head_count_kv"])
    eps, theta = float(meta[f"{arch}.attention.layer_norm_rms_epsilon"]), float(meta[f"{arch}.rope.freq_base"])
    D, L = hidden // H, len(ids)
    inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    ang = np.arange(L, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))
    rot = lambda t: t * cos + np.concatenate([-t[..., D // 2:], t[..., :D // 2]], -1) * sin
    x = w["token_embd.weight"][ids]
    for i in range(layers):
        p = f"blk.{i}."
        h = _rms(x, w[p + "attn_norm.weight"], eps)
        q = rot((h @ _unpermute(w[p + "attn_q.weight"], H).T).reshape(L, H, D).transpose(1, 0, 2))
        k = rot((h @ _unpermute(w[p + "attn_k.weight"], KV).T).reshape(L, KV, D).transpose(1, 0, 2))
        v = (h @ w[p + "attn_v.weight"].T).reshape(L, KV, D).transpose(1, 0, 2)
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
        probs = _softmax_heads(q, k, True)
        if patch and patch[0] == i:
            probs[patch[1]] = patch[2](q[patch[1]], k[patch[1]])
        x = x + (probs @ v).transpose(1, 0, 2).reshape(L, H * D) @ w[p + "attn_output.weight"].T
        h = _rms(x, w[p + "ffn_norm.weight"], eps)
        g, u = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * u) @ w[p + "ffn_down.weight"].T
    return _rms(x, w["output_norm.weight"], eps)


def patched_shift(kind, files, ids, layer, head, causal, scale):
    """Each token's Euclidean distance between the final hidden state with `layer`'s `head`
    recomputed under (causal, scale) and the unchanged model's."""
    fn = lambda q, k: whatif_weights(q, k, causal, scale(q.shape[-1]))
    if kind == "minilm":
        w = read_safetensors(files["model"])
        config = json.load(open(files["config"]))
        run = lambda patch: bert_hidden(w, config, ids, patch)
    else:
        meta, w = read_gguf(files["model"])
        run = lambda patch: llama_hidden(meta, w, ids, patch)
    before, after = run(None), run((layer, head, fn))
    return np.sqrt(((after - before) ** 2).sum(axis=-1))
