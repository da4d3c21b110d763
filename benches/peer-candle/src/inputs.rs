//! The inputs both libraries get, made once by the parent with this crate's tokenizers
//! (the same ids a user of either library would feed): MiniLM token ids at L = 8 and
//! L = 128 and a batch of 32 sentences of mixed lengths, and a SmolLM2 prompt.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wgpu_attention::model::bert::BertModel;
use wgpu_attention::model::llama::LlamaModel;
use wgpu_attention::model::resolve_model_path;

/// Written by the parent, read by each child.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Inputs {
    pub bert_dir: PathBuf,
    pub gguf: PathBuf,
    /// `[CLS] ... [SEP]` of exactly 8 and 128 tokens.
    pub l8: Vec<u32>,
    pub l128: Vec<u32>,
    /// 32 sentences, 4 to about 60 tokens.
    pub batch: Vec<Vec<u32>>,
    pub prompt: Vec<u32>,
    pub gen_tokens: usize,
    pub iters: usize,
}

const LONG_TEXT: &str = "Attention lets every token of a sentence look at every other token \
and decide how much of each to mix into its own representation. A transformer encoder stacks \
several such layers, each followed by a small feed-forward network, and the result is a \
vector per token that depends on the whole sentence. Sentence embedding models average those \
vectors into one, trained so that sentences with similar meanings end up close together, \
which is what semantic search, clustering and duplicate detection need. Running them on a \
GPU through WebGPU means the same code serves a browser, a laptop and a server, as long as \
every kernel is checked against a slow and obviously correct reference on the CPU, so that \
a fast result is also a right one, whatever the adapter and driver happen to be today.";

const WORDS: &[&str] = &[
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "warm",
    "mat",
    "while",
    "rain",
    "fell",
    "outside",
    "and",
    "children",
    "played",
    "quietly",
    "in",
    "old",
    "library",
    "near",
    "river",
    "bank",
    "before",
    "dinner",
    "was",
    "served",
    "by",
    "their",
    "grandmother",
    "who",
    "loved",
    "long",
    "stories",
];

/// 32 sentences of 2 to 58 words from a fixed pseudo-random walk over `WORDS`.
fn batch_sentences() -> Vec<String> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..32)
        .map(|i| {
            let words = 2 + (i * 7 + (next() % 5) as usize) % 57;
            (0..words)
                .map(|_| WORDS[(next() % WORDS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// `[CLS]` + the first `n - 2` word pieces of `ids` + `[SEP]`.
fn exactly(ids: &[u32], n: usize) -> Result<Vec<u32>, String> {
    if ids.len() < n {
        return Err(format!("the text has {} tokens, fewer than {n}", ids.len()));
    }
    let sep = *ids.last().ok_or("no tokens")?;
    let mut out = ids[..n - 1].to_vec();
    out.push(sep);
    Ok(out)
}

fn model_path(name: &str) -> Result<PathBuf, String> {
    resolve_model_path(name).map_err(|e| format!("{name}: {e} (run scripts/fetch-models.sh)"))
}

pub fn make(gen_tokens: usize, iters: usize) -> Result<Inputs, String> {
    let bert_dir = model_path("minilm")?;
    let gguf = model_path("smollm2")?;
    let bert = BertModel::load(&bert_dir).map_err(|e| e.to_string())?;
    let long = bert.sentence_ids(LONG_TEXT).map_err(|e| e.to_string())?;
    let sentences = batch_sentences();
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let batch = bert.tokenize_sentences(&refs).map_err(|e| e.to_string())?;
    let llama = LlamaModel::load(&gguf).map_err(|e| e.to_string())?;
    let prompt = llama
        .tokenize("The capital of France is Paris. The capital of Italy is")
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|t| t.id)
        .collect();
    Ok(Inputs {
        bert_dir,
        gguf,
        l8: exactly(&long, 8)?,
        l128: exactly(&long, 128)?,
        batch,
        prompt,
        gen_tokens,
        iters,
    })
}

pub fn read(path: &Path) -> Result<Inputs, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))
}
