//! Writes GGUF files in memory: the tiny model as a real file, and the raw material of
//! the malformed-file tests.

use wgpu_attention::model::llama::{LlamaConfig, LlamaWeights, TokenizerSpec};

pub enum Meta {
    U32(u32),
    U64(u64),
    F32(f32),
    Bool(bool),
    Str(String),
    Strs(Vec<String>),
    I32s(Vec<i32>),
}

pub struct Tensor {
    pub name: String,
    /// Innermost first.
    pub dims: Vec<u64>,
    pub ty: u32,
    pub data: Vec<u8>,
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn value(out: &mut Vec<u8>, v: &Meta) {
    match v {
        Meta::U32(x) => {
            out.extend(4u32.to_le_bytes());
            out.extend(x.to_le_bytes());
        }
        Meta::U64(x) => {
            out.extend(10u32.to_le_bytes());
            out.extend(x.to_le_bytes());
        }
        Meta::F32(x) => {
            out.extend(6u32.to_le_bytes());
            out.extend(x.to_le_bytes());
        }
        Meta::Bool(x) => {
            out.extend(7u32.to_le_bytes());
            out.push(u8::from(*x));
        }
        Meta::Str(s) => {
            out.extend(8u32.to_le_bytes());
            string(out, s);
        }
        Meta::Strs(items) => {
            out.extend(9u32.to_le_bytes());
            out.extend(8u32.to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for s in items {
                string(out, s);
            }
        }
        Meta::I32s(items) => {
            out.extend(9u32.to_le_bytes());
            out.extend(5u32.to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for x in items {
                out.extend(x.to_le_bytes());
            }
        }
    }
}

/// A version-3 GGUF file with alignment 32.
pub fn write(meta: &[(String, Meta)], tensors: &[Tensor]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((meta.len() as u64).to_le_bytes());
    for (k, v) in meta {
        string(&mut out, k);
        value(&mut out, v);
    }
    let mut offset = 0u64;
    for t in tensors {
        string(&mut out, &t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.ty.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offset = (offset + t.data.len() as u64).next_multiple_of(32);
    }
    out.resize(out.len().next_multiple_of(32), 0);
    for t in tensors {
        out.extend(&t.data);
        out.resize(out.len().next_multiple_of(32), 0);
    }
    out
}

fn f32_tensor(name: String, dims: &[usize], data: &[f32]) -> Tensor {
    Tensor {
        name,
        dims: dims.iter().map(|&d| d as u64).collect(),
        ty: 0,
        data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

pub fn llama_meta(c: &LlamaConfig, tok: &TokenizerSpec) -> Vec<(String, Meta)> {
    let u = |v: usize| Meta::U32(v as u32);
    vec![
        ("general.architecture".into(), Meta::Str("llama".into())),
        ("llama.block_count".into(), u(c.layers)),
        ("llama.context_length".into(), u(c.context)),
        ("llama.embedding_length".into(), u(c.hidden)),
        ("llama.feed_forward_length".into(), u(c.intermediate)),
        ("llama.attention.head_count".into(), u(c.heads)),
        ("llama.attention.head_count_kv".into(), u(c.kv_heads)),
        (
            "llama.rope.freq_base".into(),
            Meta::F32(c.rope_theta as f32),
        ),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            Meta::F32(c.rms_eps as f32),
        ),
        ("llama.vocab_size".into(), u(c.vocab)),
        ("llama.rope.dimension_count".into(), u(c.head_dim)),
        ("tokenizer.ggml.model".into(), Meta::Str("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Meta::Str(tok.pre.clone())),
        (
            "tokenizer.ggml.tokens".into(),
            Meta::Strs(tok.tokens.clone()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Meta::I32s(tok.token_types.clone()),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Meta::Strs(tok.merges.clone()),
        ),
        (
            "tokenizer.ggml.bos_token_id".into(),
            Meta::U64(u64::from(tok.bos.unwrap_or(0))),
        ),
        (
            "tokenizer.ggml.eos_token_id".into(),
            Meta::U32(tok.eos.unwrap_or(0)),
        ),
        (
            "tokenizer.ggml.add_bos_token".into(),
            Meta::Bool(tok.add_bos),
        ),
    ]
}

pub fn llama_tensors(c: &LlamaConfig, w: &LlamaWeights) -> Vec<Tensor> {
    let (h, q, kv, f) = (
        c.hidden,
        c.heads * c.head_dim,
        c.kv_heads * c.head_dim,
        c.intermediate,
    );
    let mut t = vec![f32_tensor(
        "token_embd.weight".into(),
        &[h, c.vocab],
        &w.embed,
    )];
    for (i, l) in w.layers.iter().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}");
        t.push(f32_tensor(n("attn_norm.weight"), &[h], &l.attn_norm));
        t.push(f32_tensor(n("attn_q.weight"), &[h, q], &l.wq));
        t.push(f32_tensor(n("attn_k.weight"), &[h, kv], &l.wk));
        t.push(f32_tensor(n("attn_v.weight"), &[h, kv], &l.wv));
        t.push(f32_tensor(n("attn_output.weight"), &[q, h], &l.wo));
        t.push(f32_tensor(n("ffn_norm.weight"), &[h], &l.ffn_norm));
        t.push(f32_tensor(n("ffn_gate.weight"), &[h, f], &l.gate));
        t.push(f32_tensor(n("ffn_up.weight"), &[h, f], &l.up));
        t.push(f32_tensor(n("ffn_down.weight"), &[f, h], &l.down));
    }
    t.push(f32_tensor("output_norm.weight".into(), &[h], &w.out_norm));
    if let Some(o) = &w.lm_head {
        t.push(f32_tensor("output.weight".into(), &[h, c.vocab], o));
    }
    t
}
