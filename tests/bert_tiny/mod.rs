//! A tiny random BERT built in memory (config, safetensors, WordPiece tokenizer), so the
//! model path runs in every `cargo test` and in the browser without a downloaded file.

#![allow(dead_code)]

use safetensors::tensor::{Dtype, TensorView};

/// The tiny model's vocabulary: BERT's four special tokens first.
pub const VOCAB: &[&str] = &[
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "i", "love", "ai", "!",
    "##s", "a", "dog", "ate", "fish", "it", "was",
];
pub const LAYERS: usize = 2;
pub const HEADS: usize = 4;
pub const HIDDEN: usize = 32;
/// Not a multiple of the linear kernel's 16-wide tiles.
pub const INTERMEDIATE: usize = 40;
pub const POSITIONS: usize = 24;

/// The three files of the tiny model: config.json, model.safetensors, tokenizer.json.
pub struct TinyBert {
    pub config: String,
    pub safetensors: Vec<u8>,
    pub tokenizer: String,
}

/// SplitMix64 to uniform to a centred value in [-scale, scale).
struct Seeded(u64);

impl Seeded {
    fn next(&mut self, scale: f32) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let u = (z >> 11) as f64 / (1u64 << 53) as f64;
        ((2.0 * u - 1.0) as f32) * scale
    }
}

pub fn config_json() -> String {
    format!(
        r#"{{"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
  "vocab_size": {}, "hidden_size": {HIDDEN}, "num_hidden_layers": {LAYERS},
  "num_attention_heads": {HEADS}, "intermediate_size": {INTERMEDIATE},
  "max_position_embeddings": {POSITIONS}, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
  "position_embedding_type": "absolute"}}"#,
        VOCAB.len()
    )
}

pub fn tokenizer_json() -> String {
    let special = |id: usize, s: &str| {
        format!(
            r#"{{"id": {id}, "content": "{s}", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}}"#
        )
    };
    let added: Vec<String> = (0..4).map(|i| special(i, VOCAB[i])).collect();
    let vocab: Vec<String> = VOCAB
        .iter()
        .enumerate()
        .map(|(i, t)| format!(r#""{t}": {i}"#))
        .collect();
    format!(
        r###"{{
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{}],
  "normalizer": {{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true}},
  "pre_tokenizer": {{"type": "BertPreTokenizer"}},
  "post_processor": {{"type": "TemplateProcessing",
    "single": [{{"SpecialToken": {{"id": "[CLS]", "type_id": 0}}}}, {{"Sequence": {{"id": "A", "type_id": 0}}}}, {{"SpecialToken": {{"id": "[SEP]", "type_id": 0}}}}],
    "pair": [{{"SpecialToken": {{"id": "[CLS]", "type_id": 0}}}}, {{"Sequence": {{"id": "A", "type_id": 0}}}}, {{"SpecialToken": {{"id": "[SEP]", "type_id": 0}}}}, {{"Sequence": {{"id": "B", "type_id": 1}}}}, {{"SpecialToken": {{"id": "[SEP]", "type_id": 1}}}}],
    "special_tokens": {{"[CLS]": {{"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}}, "[SEP]": {{"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}}}}},
  "decoder": {{"type": "WordPiece", "prefix": "##", "cleanup": true}},
  "model": {{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": {{{}}}}}
}}"###,
        added.join(", "),
        vocab.join(", ")
    )
}

/// Every tensor of the tiny model: (name, shape, values), seeded by `seed`.
pub fn tensors(seed: u64) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut rng = Seeded(seed);
    let mut out = Vec::new();
    let mut add = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        let n = shape.iter().product();
        let values = (0..n).map(|_| offset + rng.next(scale)).collect();
        out.push((name, shape, values));
    };
    let (h, i, v) = (HIDDEN, INTERMEDIATE, VOCAB.len());
    add(
        "embeddings.word_embeddings.weight".into(),
        vec![v, h],
        1.0,
        0.0,
    );
    add(
        "embeddings.position_embeddings.weight".into(),
        vec![POSITIONS, h],
        0.5,
        0.0,
    );
    add(
        "embeddings.token_type_embeddings.weight".into(),
        vec![2, h],
        0.5,
        0.0,
    );
    add("embeddings.LayerNorm.weight".into(), vec![h], 0.2, 1.0);
    add("embeddings.LayerNorm.bias".into(), vec![h], 0.1, 0.0);
    for l in 0..LAYERS {
        let p = format!("encoder.layer.{l}.");
        for name in [
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
        ] {
            add(format!("{p}{name}.weight"), vec![h, h], 0.5, 0.0);
            add(format!("{p}{name}.bias"), vec![h], 0.1, 0.0);
        }
        add(
            format!("{p}attention.output.dense.weight"),
            vec![h, h],
            0.3,
            0.0,
        );
        add(format!("{p}attention.output.dense.bias"), vec![h], 0.1, 0.0);
        add(
            format!("{p}attention.output.LayerNorm.weight"),
            vec![h],
            0.2,
            1.0,
        );
        add(
            format!("{p}attention.output.LayerNorm.bias"),
            vec![h],
            0.1,
            0.0,
        );
        add(
            format!("{p}intermediate.dense.weight"),
            vec![i, h],
            0.4,
            0.0,
        );
        add(format!("{p}intermediate.dense.bias"), vec![i], 0.2, 0.0);
        add(format!("{p}output.dense.weight"), vec![h, i], 0.3, 0.0);
        add(format!("{p}output.dense.bias"), vec![h], 0.1, 0.0);
        add(format!("{p}output.LayerNorm.weight"), vec![h], 0.2, 1.0);
        add(format!("{p}output.LayerNorm.bias"), vec![h], 0.1, 0.0);
    }
    out
}

/// Serialises tensors as a safetensors file.
pub fn safetensors_of(tensors: &[(String, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, s, v)| {
            (
                n.clone(),
                s.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = bytes
        .iter()
        .map(|(n, s, b)| {
            let view = TensorView::new(Dtype::F32, s.clone(), b).expect("tensor view");
            (n.clone(), view)
        })
        .collect();
    safetensors::serialize(views, None).expect("serialize safetensors")
}

pub fn tiny_bert(seed: u64) -> TinyBert {
    TinyBert {
        config: config_json(),
        safetensors: safetensors_of(&tensors(seed)),
        tokenizer: tokenizer_json(),
    }
}

/// Writes the tiny model as a model directory.
#[cfg(not(target_arch = "wasm32"))]
pub fn write_dir(dir: &std::path::Path, m: &TinyBert) {
    std::fs::create_dir_all(dir).expect("create model dir");
    std::fs::write(dir.join("config.json"), &m.config).expect("write config");
    std::fs::write(dir.join("model.safetensors"), &m.safetensors).expect("write weights");
    std::fs::write(dir.join("tokenizer.json"), &m.tokenizer).expect("write tokenizer");
}
