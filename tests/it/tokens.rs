//! Tokens as people read them and the word view, without downloaded files: the labels
//! and words of the tiny byte-level llama (every byte its own token, so each Hangul
//! syllable spans three) and the tiny WordPiece BERT, and `viz::word_attention` against
//! the float64 numpy aggregation of tests/fixtures/words/ (generate.py).

use std::ops::Range;

use ndarray::{Array2, ArrayView2};
use ndarray_npy::read_npy;
use wgpu_attention::model::bert::BertModel;
use wgpu_attention::model::{words, Model, Token, CONTINUATION_MARK};
use wgpu_attention::viz::word_attention;

use crate::bert_tiny::tiny_bert;
use crate::model_llama::tiny_model::tiny_model;

pub const KOREAN: &str = "고양이가 생선을 먹었다 그것은 맛있었다";

/// GPT-2's byte symbols for bytes that do not print as themselves (`Ġ`, `Ċ`, ...), and the
/// Latin-1 letters that stand for the bytes of a multi-byte character: neither may show
/// in a label of a text that holds none of them.
pub fn is_byte_symbol(c: char) -> bool {
    matches!(c as u32, 0x80..=0x143) || c == '\u{FFFD}'
}

/// The Hangul syllables of `text`, in order.
pub fn syllables(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| ('\u{AC00}'..='\u{D7A3}').contains(c))
        .collect()
}

/// Asserts that every syllable of `text` shows, once, in order, across `labels`, and that
/// no label holds a byte symbol.
pub fn assert_reads_as(text: &str, labels: &[String]) {
    let shown: String = labels.concat();
    for l in labels {
        assert!(
            !l.chars().any(is_byte_symbol),
            "label {l:?} holds a byte symbol: {labels:?}"
        );
    }
    assert_eq!(
        syllables(&shown),
        syllables(text),
        "the labels {labels:?} do not spell {text:?}"
    );
}

fn llama() -> Model {
    Model::Llama(Box::new(tiny_model(1, true)))
}

fn bert() -> Model {
    let m = tiny_bert(1);
    Model::Bert(Box::new(
        BertModel::from_parts(m.config.as_bytes(), &m.safetensors, m.tokenizer.as_bytes())
            .expect("tiny bert"),
    ))
}

fn labels(tokens: &[Token]) -> Vec<String> {
    tokens.iter().map(|t| t.text.clone()).collect()
}

fn word_texts(text: &str, tokens: &[Token]) -> Vec<String> {
    words(text, tokens).into_iter().map(|w| w.text).collect()
}

#[test]
fn byte_level_korean_reads_as_korean_with_marks_on_the_continuations() {
    let m = llama();
    let tokens = m.tokenize(KOREAN).expect("tokenize");
    // One token per byte: three per syllable, one per space.
    assert_eq!(tokens.len(), KOREAN.len());
    let shown = labels(&tokens);
    assert_reads_as(KOREAN, &shown);
    assert_eq!(shown[0], "고");
    assert_eq!(shown[1], CONTINUATION_MARK);
    assert_eq!(shown[2], CONTINUATION_MARK);
    assert_eq!(shown[12], "␣", "the space after 고양이가");
    assert!(
        tokens[1].raw.chars().all(is_byte_symbol),
        "raw keeps the byte symbols"
    );
    assert_eq!(tokens[0].bytes, "고".as_bytes()[..1]);
    assert_eq!(
        word_texts(KOREAN, &tokens),
        ["고양이가", "생선을", "먹었다", "그것은", "맛있었다"]
    );
    // The space before a word belongs to it, as byte-level BPE attaches it.
    let ws = words(KOREAN, &tokens);
    assert_eq!(ws[1].tokens, 12..22);
}

#[test]
fn a_leading_space_is_one_mark_and_merged_tokens_decode() {
    let m = llama();
    let tokens = m.tokenize("a the 42").expect("tokenize");
    assert_eq!(labels(&tokens), ["a", "␣t", "h", "e", "␣", "4", "2"]);
    assert_eq!(tokens[1].raw, "Ġt");
    assert_eq!(tokens[1].bytes, b" t");
    assert_eq!(tokens[1].span, Some(1..3));
    assert_eq!(word_texts("a the 42", &tokens), ["a", "the", "42"]);
}

#[test]
fn whitespace_and_special_tokens_make_the_words_the_docs_promise() {
    let m = llama();
    let cases: &[(&str, &[&str])] = &[
        (
            "line one\nline two\n\n  indented",
            &["line", "one", "line", "two", "indented"],
        ),
        ("   leading spaces", &["leading", "spaces"]),
        ("end\n", &["end"]),
        ("mat. I love AI !", &["mat.", "I", "love", "AI", "!"]),
        ("x<|endoftext|>y z", &["x", "<|endoftext|>", "y", "z"]),
        ("<|endoftext|>\n", &["<|endoftext|>", "↵"]),
        ("  ", &["␣␣"]),
    ];
    for (text, want) in cases {
        let tokens = m.tokenize(text).expect("tokenize");
        assert_eq!(
            &word_texts(text, &tokens),
            want,
            "{text:?}: {:?}",
            labels(&tokens)
        );
        // Words tile the tokens in order.
        let ws = words(text, &tokens);
        assert_eq!(ws.first().map(|w| w.tokens.start), Some(0));
        assert_eq!(ws.last().map(|w| w.tokens.end), Some(tokens.len()));
        for pair in ws.windows(2) {
            assert_eq!(pair[0].tokens.end, pair[1].tokens.start, "{text:?}");
        }
    }
    let tokens = m.tokenize("a\tb\nc").expect("tokenize");
    assert_eq!(labels(&tokens), ["a", "⇥", "b", "↵", "c"]);
}

#[test]
fn wordpiece_labels_keep_hashes_show_the_text_and_join_in_words() {
    let m = bert();
    let text = "The cats love zebras!";
    let tokens = m.tokenize(text).expect("tokenize");
    let raw: Vec<&str> = tokens.iter().map(|t| t.raw.as_str()).collect();
    assert_eq!(
        raw,
        ["[CLS]", "the", "cat", "##s", "love", "[UNK]", "!", "[SEP]"]
    );
    assert_eq!(
        labels(&tokens),
        ["[CLS]", "The", "cat", "##s", "love", "zebras", "!", "[SEP]"]
    );
    assert_eq!(
        word_texts(text, &tokens),
        ["[CLS]", "The", "cats", "love", "zebras!", "[SEP]"]
    );
    assert!(tokens[0].special && tokens[0].span.is_none());
    assert_eq!(tokens[3].bytes, b"s");
    // Korean through a vocabulary without it: each word an [UNK] labelled with the word.
    let tokens = m.tokenize(KOREAN).expect("tokenize");
    assert_reads_as(KOREAN, &labels(&tokens));
    assert_eq!(word_texts(KOREAN, &tokens).len(), 7);
}

#[test]
fn the_english_lecture_sentences_have_one_word_label_per_word() {
    for m in [llama(), bert()] {
        for text in ["The cat sat on the mat", "I love AI !"] {
            let tokens = m.tokenize(text).expect("tokenize");
            let got: Vec<String> = word_texts(text, &tokens)
                .into_iter()
                .filter(|w| !w.starts_with('['))
                .collect();
            let want: Vec<&str> = text.split_whitespace().collect();
            assert_eq!(got, want, "{text}");
        }
    }
}

/// The word view computed here in float64, straight from its definition.
fn aggregate_f64(w: ArrayView2<f32>, ranges: &[Range<usize>]) -> Array2<f64> {
    Array2::from_shape_fn((ranges.len(), ranges.len()), |(a, b)| {
        let q = &ranges[a];
        let mut sum = 0.0;
        for i in q.clone() {
            for j in ranges[b].clone() {
                sum += f64::from(w[[i, j]]);
            }
        }
        sum / q.len() as f64
    })
}

/// `got` within 1e-6 of `want`, rows summing to 1, and exactly 0 exactly where `want` is.
pub fn assert_word_view(what: &str, got: ArrayView2<f32>, want: ArrayView2<f64>) {
    assert_eq!(got.dim(), want.dim(), "{what}: shape");
    let mut worst = ((0, 0), 0.0f64);
    for ((i, j), &w) in want.indexed_iter() {
        let g = f64::from(got[[i, j]]);
        assert_eq!(g == 0.0, w == 0.0, "{what} ({i}, {j}): {g} against {w}");
        if (g - w).abs() > worst.1 {
            worst = ((i, j), (g - w).abs());
        }
    }
    assert!(
        worst.1 <= 1e-6,
        "{what}: worst cell {:?} off by {:e}",
        worst.0,
        worst.1
    );
    for (i, row) in got.outer_iter().enumerate() {
        let sum: f64 = row.iter().map(|&x| f64::from(x)).sum();
        assert!((sum - 1.0).abs() <= 1e-6, "{what}: row {i} sums to {sum}");
    }
}

fn ranges_of(sizes: &[usize]) -> Vec<Range<usize>> {
    let mut at = 0;
    sizes
        .iter()
        .map(|&n| {
            at += n;
            at - n..at
        })
        .collect()
}

#[test]
fn the_word_view_matches_the_numpy_float64_aggregation() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/words");
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    let cases = cases.as_array().expect("a list");
    assert!(cases.len() >= 5);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let sizes: Vec<usize> = case["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap() as usize)
            .collect();
        let tokens: Array2<f32> = read_npy(dir.join(format!("{name}_tokens.npy"))).unwrap();
        let want: Array2<f64> = read_npy(dir.join(format!("{name}_words.npy"))).unwrap();
        let ranges = ranges_of(&sizes);
        let got = word_attention(tokens.view(), &ranges, &ranges).expect("word view");
        assert_word_view(name, got.view(), want.view());
        if case["causal"].as_bool().unwrap() {
            for a in 0..sizes.len() {
                for b in a + 1..sizes.len() {
                    assert_eq!(got[[a, b]], 0.0, "{name}: ({a}, {b}) is masked");
                }
            }
        }
    }
}

#[test]
fn the_tiny_models_word_view_matches_a_float64_aggregation_of_their_weights() {
    for (m, text) in [
        (llama(), KOREAN),
        (bert(), "the cats ate the fish; it was a dog"),
    ] {
        let tokens = m.tokenize(text).expect("tokenize");
        let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
        let att = m
            .forward_cpu(&ids, true)
            .expect("forward")
            .attention
            .unwrap();
        let ranges: Vec<_> = words(text, &tokens).into_iter().map(|w| w.tokens).collect();
        for l in 0..att.dim().0 {
            for h in 0..att.dim().1 {
                let w = att.slice(ndarray::s![l, h, .., ..]);
                let got = word_attention(w, &ranges, &ranges).expect("word view");
                assert_word_view(
                    &format!("{text} L{l} H{h}"),
                    got.view(),
                    aggregate_f64(w, &ranges).view(),
                );
            }
        }
    }
}
