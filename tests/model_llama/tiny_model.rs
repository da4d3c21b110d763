//! A tiny llama with seeded random weights and a byte-level vocabulary, made in memory:
//! small enough for debug builds and the browser, with every feature of the real one
//! (grouped-query heads, RoPE, SwiGLU, tied or separate output).

use wgpu_attention::model::llama::{
    LayerWeights, LlamaConfig, LlamaModel, LlamaTokenizer, LlamaWeights, TokenizerSpec,
};

pub const TINY: LlamaConfig = LlamaConfig {
    layers: 2,
    hidden: 64,
    heads: 4,
    kv_heads: 2,
    head_dim: 16,
    intermediate: 96,
    vocab: 258,
    context: 80,
    // Exact in f32, so a GGUF round trip (f32 metadata) gives the same config.
    rms_eps: 1.0 / 65536.0,
    rope_theta: 10_000.0,
};

/// splitmix64 with Box-Muller normals (the test suite's generator, restated here so the
/// browser test needs no other helper).
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn normal(&mut self, scale: f32) -> f32 {
        let (u1, u2) = (self.next().max(1e-300), self.next());
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32 * scale
    }

    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal(scale)).collect()
    }

    fn norm(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| 1.0 + self.normal(0.1)).collect()
    }
}

/// GPT-2's byte-to-character table: every byte as one printable character.
pub fn byte_chars() -> Vec<String> {
    let mut bytes: Vec<u32> = (b'!'..=b'~')
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .map(u32::from)
        .collect();
    let mut chars = bytes.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bytes.contains(&b) {
            bytes.push(b);
            chars.push(256 + n);
            n += 1;
        }
    }
    let mut table = vec![String::new(); 256];
    for (b, c) in bytes.iter().zip(chars) {
        table[*b as usize] = char::from_u32(c).unwrap_or('?').to_string();
    }
    table
}

/// The tokenizer of the tiny model: 256 byte tokens, one merge ("Ġ" + "t"), and an
/// end-of-sequence control token.
pub fn tiny_tokenizer_spec() -> TokenizerSpec {
    let mut tokens = byte_chars();
    tokens.push("Ġt".into());
    tokens.push("<|endoftext|>".into());
    let mut token_types = vec![1; 257];
    token_types.push(3);
    TokenizerSpec {
        tokens,
        merges: vec!["Ġ t".into()],
        token_types,
        pre: "smollm".into(),
        bos: Some(257),
        eos: Some(257),
        add_bos: false,
    }
}

pub fn tiny_weights(seed: u64, tied: bool) -> LlamaWeights {
    let c = TINY;
    let mut r = Draw(seed);
    let (h, q, kv, f) = (
        c.hidden,
        c.heads * c.head_dim,
        c.kv_heads * c.head_dim,
        c.intermediate,
    );
    let s = 1.0 / (h as f32).sqrt();
    let layers = (0..c.layers)
        .map(|_| LayerWeights {
            attn_norm: r.norm(h),
            wq: r.vec(q * h, 2.0 * s),
            wk: r.vec(kv * h, 2.0 * s),
            wv: r.vec(kv * h, s),
            wo: r.vec(h * q, s),
            ffn_norm: r.norm(h),
            gate: r.vec(f * h, s),
            up: r.vec(f * h, s),
            down: r.vec(h * f, 1.0 / (f as f32).sqrt()),
        })
        .collect();
    LlamaWeights {
        embed: r.vec(c.vocab * h, 1.0),
        layers,
        out_norm: r.norm(h),
        lm_head: (!tied).then(|| r.vec(c.vocab * h, s)),
    }
}

pub fn tiny_model(seed: u64, tied: bool) -> LlamaModel {
    let tokenizer = LlamaTokenizer::new(&tiny_tokenizer_spec()).expect("tiny tokenizer");
    LlamaModel::from_parts(TINY, tiny_weights(seed, tied), tokenizer).expect("tiny model")
}
