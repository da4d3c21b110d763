//! How a last hidden state becomes one sentence embedding, as sentence-transformers
//! defines it for a model directory: `modules.json` lists the modules (Transformer, then
//! Pooling, then optionally Normalize), the Pooling module's `config.json` (for
//! all-MiniLM-L6-v2, `1_Pooling/config.json`) says which pooling, and
//! `sentence_bert_config.json` gives `max_seq_length`, where sentence-transformers
//! truncates (this crate refuses longer sentences instead of cutting them).
//!
//! A directory without `modules.json` is a plain transformer; sentence-transformers then
//! builds mean pooling without normalisation, and so does [`SentenceConfig::plain`].

use std::path::Path;

use ndarray::ArrayView2;
use serde::Deserialize;

use crate::model::files::read_bounded;
use crate::model::ModelError;

/// Far above any real sentence-transformers config file.
const CONFIG_LIMIT: u64 = 1 << 20;

/// Which pooling of the token rows sentence-transformers' `Pooling` module applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolingMode {
    /// The mean of the real tokens' rows (`pooling_mode_mean_tokens`).
    Mean,
    /// The first row, the `[CLS]` token (`pooling_mode_cls_token`).
    Cls,
    /// The largest value of each column over the real tokens (`pooling_mode_max_tokens`).
    Max,
    /// The sum of the real tokens' rows divided by the square root of their number
    /// (`pooling_mode_mean_sqrt_len_tokens`).
    MeanSqrtLen,
}

/// The pooling and whether the embedding is divided by its L2 norm (a `Normalize` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pooling {
    pub mode: PoolingMode,
    pub normalize: bool,
}

/// What the crate needs of a sentence-transformers directory to embed sentences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentenceConfig {
    pub pooling: Pooling,
    /// Sentences with more tokens are refused (sentence-transformers would truncate).
    /// `None`: the model's positions are the only bound.
    pub max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct Module {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    path: String,
}

/// `1_Pooling/config.json`: the flags this crate reads; unknown keys are ignored.
#[derive(Deserialize)]
struct PoolingFile {
    word_embedding_dimension: Option<usize>,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

#[derive(Deserialize)]
struct SentenceBertFile {
    max_seq_length: Option<usize>,
}

fn parse<'a, T: Deserialize<'a>>(what: &str, bytes: &'a [u8]) -> Result<T, ModelError> {
    serde_json::from_slice(bytes).map_err(|e| ModelError::format(what, e.to_string()))
}

impl SentenceConfig {
    /// A plain transformer directory: mean pooling, no normalisation, no length cap.
    pub fn plain() -> Self {
        Self {
            pooling: Pooling {
                mode: PoolingMode::Mean,
                normalize: false,
            },
            max_seq_length: None,
        }
    }

    /// From the files' contents: `modules.json`, the Pooling module's `config.json` and,
    /// if there is one, `sentence_bert_config.json`. `hidden` is the model's width, which
    /// the pooling config's `word_embedding_dimension` must match.
    ///
    /// # Errors
    /// [`ModelError::Format`] for malformed JSON or a dimension that disagrees,
    /// [`ModelError::Unsupported`] for modules or pooling modes this crate does not run
    /// (a Dense module, weighted-mean or last-token pooling, several modes concatenated).
    pub fn from_files(
        modules_json: &[u8],
        pooling_json: &[u8],
        sentence_bert_json: Option<&[u8]>,
        hidden: usize,
    ) -> Result<Self, ModelError> {
        let modules: Vec<Module> = parse("modules.json", modules_json)?;
        let kinds: Vec<&str> = modules
            .iter()
            .map(|m| m.kind.rsplit('.').next().unwrap_or_default())
            .collect();
        let normalize = match kinds.as_slice() {
            ["Transformer", "Pooling"] => false,
            ["Transformer", "Pooling", "Normalize"] => true,
            _ => {
                return Err(ModelError::Unsupported(format!(
                    "modules.json lists {kinds:?}; this crate runs Transformer, Pooling and an optional Normalize"
                )))
            }
        };
        let p: PoolingFile = parse("pooling config.json", pooling_json)?;
        if let Some(dim) = p.word_embedding_dimension.filter(|&d| d != hidden) {
            return Err(ModelError::format(
                "pooling config.json",
                format!("word_embedding_dimension {dim} is not the model's hidden size {hidden}"),
            ));
        }
        if p.pooling_mode_weightedmean_tokens || p.pooling_mode_lasttoken {
            return Err(ModelError::Unsupported(
                "weighted-mean and last-token pooling".into(),
            ));
        }
        let modes: Vec<PoolingMode> = [
            (p.pooling_mode_cls_token, PoolingMode::Cls),
            (p.pooling_mode_mean_tokens, PoolingMode::Mean),
            (p.pooling_mode_max_tokens, PoolingMode::Max),
            (
                p.pooling_mode_mean_sqrt_len_tokens,
                PoolingMode::MeanSqrtLen,
            ),
        ]
        .into_iter()
        .filter_map(|(on, mode)| on.then_some(mode))
        .collect();
        let &[mode] = modes.as_slice() else {
            return Err(ModelError::Unsupported(format!(
                "the pooling config turns on {} pooling modes; this crate runs exactly one",
                modes.len()
            )));
        };
        let max_seq_length = match sentence_bert_json {
            Some(bytes) => parse::<SentenceBertFile>("sentence_bert_config.json", bytes)?
                .max_seq_length
                .filter(|&n| n > 0),
            None => None,
        };
        Ok(Self {
            pooling: Pooling { mode, normalize },
            max_seq_length,
        })
    }

    /// Reads the files from a model directory; [`SentenceConfig::plain`] when it has no
    /// `modules.json`.
    ///
    /// # Errors
    /// As [`SentenceConfig::from_files`], and [`ModelError::Io`] for a listed file that
    /// cannot be read.
    pub(crate) fn read_dir(dir: &Path, hidden: usize) -> Result<Self, ModelError> {
        let modules_path = dir.join("modules.json");
        if !modules_path.exists() {
            return Ok(Self::plain());
        }
        let modules_json = read_bounded(&modules_path, CONFIG_LIMIT)?;
        let modules: Vec<Module> = parse("modules.json", &modules_json)?;
        let pooling_dir = modules
            .iter()
            .find(|m| m.kind.ends_with(".Pooling") || m.kind == "Pooling")
            .map(|m| m.path.as_str())
            .unwrap_or_default();
        // The module's folder is relative to the model's and stays inside it.
        if Path::new(pooling_dir)
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(ModelError::format(
                "modules.json",
                format!("the Pooling module's path {pooling_dir:?} leaves the model directory"),
            ));
        }
        let pooling_json = read_bounded(&dir.join(pooling_dir).join("config.json"), CONFIG_LIMIT)?;
        let sentence_path = dir.join("sentence_bert_config.json");
        let sentence_json = if sentence_path.exists() {
            Some(read_bounded(&sentence_path, CONFIG_LIMIT)?)
        } else {
            None
        };
        Self::from_files(
            &modules_json,
            &pooling_json,
            sentence_json.as_deref(),
            hidden,
        )
    }
}

impl Pooling {
    /// all-MiniLM-L6-v2's: mean pooling, then L2 normalisation.
    pub const MEAN_NORMALIZED: Self = Self {
        mode: PoolingMode::Mean,
        normalize: true,
    };

    /// The embedding of one sentence from its real tokens' rows `(tokens, hidden)` (no
    /// padding rows), in f64. sentence-transformers clamps the token count at 1e-9 and
    /// the norm at 1e-12; a sentence always has at least one token here.
    pub(crate) fn apply<T: Copy + Into<f64>>(&self, hidden: ArrayView2<'_, T>) -> Vec<f64> {
        let (rows, cols) = hidden.dim();
        let column_sums = || {
            let mut sum = vec![0.0f64; cols];
            for row in hidden.rows() {
                for (s, &v) in sum.iter_mut().zip(row) {
                    *s += v.into();
                }
            }
            sum
        };
        let pooled: Vec<f64> = match self.mode {
            PoolingMode::Mean => {
                let n = (rows as f64).max(1e-9);
                column_sums().into_iter().map(|s| s / n).collect()
            }
            PoolingMode::MeanSqrtLen => {
                let n = (rows as f64).max(1e-9).sqrt();
                column_sums().into_iter().map(|s| s / n).collect()
            }
            PoolingMode::Cls => match hidden.rows().into_iter().next() {
                Some(first) => first.iter().map(|&v| v.into()).collect(),
                None => vec![0.0; cols],
            },
            PoolingMode::Max => (0..cols)
                .map(|c| {
                    hidden
                        .column(c)
                        .iter()
                        .map(|&v| v.into())
                        .fold(f64::NEG_INFINITY, f64::max)
                })
                .collect(),
        };
        if !self.normalize {
            return pooled;
        }
        let norm = pooled.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
        pooled.into_iter().map(|v| v / norm).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODULES: &str = r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
 {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
 {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]"#;
    const MEAN: &str = r#"{"word_embedding_dimension": 4, "pooling_mode_cls_token": false,
 "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false,
 "pooling_mode_mean_sqrt_len_tokens": false}"#;

    #[test]
    fn minilm_files_mean_and_normalize() {
        let c = SentenceConfig::from_files(
            MODULES.as_bytes(),
            MEAN.as_bytes(),
            Some(br#"{"max_seq_length": 256, "do_lower_case": false}"#),
            4,
        )
        .unwrap();
        assert_eq!(c.pooling, Pooling::MEAN_NORMALIZED);
        assert_eq!(c.max_seq_length, Some(256));
    }

    #[test]
    fn unsupported_and_malformed_files_are_refused() {
        let two = MEAN.replace(
            r#""pooling_mode_max_tokens": false"#,
            r#""pooling_mode_max_tokens": true"#,
        );
        let cases: [(&str, &str, usize); 4] = [
            (MODULES, &two, 4),
            (MODULES, MEAN, 8),
            (
                r#"[{"type": "sentence_transformers.models.Transformer"}]"#,
                MEAN,
                4,
            ),
            ("{", MEAN, 4),
        ];
        for (modules, pooling, hidden) in cases {
            let r =
                SentenceConfig::from_files(modules.as_bytes(), pooling.as_bytes(), None, hidden);
            assert!(r.is_err(), "{modules} {pooling} accepted");
        }
    }

    #[test]
    fn each_mode_on_a_small_matrix() {
        let h = ndarray::array![[1.0f32, -2.0], [3.0, 6.0]];
        let run = |mode, normalize| Pooling { mode, normalize }.apply(h.view());
        assert_eq!(run(PoolingMode::Mean, false), vec![2.0, 2.0]);
        assert_eq!(run(PoolingMode::Cls, false), vec![1.0, -2.0]);
        assert_eq!(run(PoolingMode::Max, false), vec![3.0, 6.0]);
        let s = 2f64.sqrt();
        assert_eq!(run(PoolingMode::MeanSqrtLen, false), vec![4.0 / s, 4.0 / s]);
        let n = run(PoolingMode::Mean, true);
        assert!((n[0] - 0.5f64.sqrt()).abs() < 1e-15 && (n[1] - n[0]).abs() < 1e-15);
    }
}
