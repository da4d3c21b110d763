//! Tokens as people read them: the text each token stands for, labelled so that a figure
//! reads as the sentence typed, and the whitespace-delimited words the tokens make up.
//!
//! Tokenizers spell their tokens in symbols of their own: GPT-2's byte-level BPE maps every
//! byte to a printable character (`Ġ` is a space, `Ċ` a newline, and the three bytes of a
//! Hangul syllable become three Latin-1 letters, often split across tokens); WordPiece
//! marks a piece that continues a word with `##`, lowercases and decomposes Hangul into
//! jamo, and replaces a word it cannot spell with `[UNK]`. Each [`Token`] keeps that
//! spelling (`raw`) and adds the bytes it stands for, where it lies in the input text,
//! and its label (`text`):
//!
//! - a leading space is shown as [`SPACE_MARK`] (`␣love`), a newline as [`NEWLINE_MARK`],
//!   a tab as [`TAB_MARK`]; other control characters as their Unicode control pictures;
//! - each character of the text is labelled once, on the first token that holds any of
//!   its bytes; a token that holds only the rest of a character begun on an earlier token
//!   (a byte-level piece of a syllable, a WordPiece jamo after the first) is labelled
//!   [`CONTINUATION_MARK`], so "고양이가", which SmolLM2 splits into ten byte-level
//!   tokens, reads `고 ⋯ ⋯ 양 ⋯ ⋯ 이 가 ⋯ ⋯` along an axis, never byte symbols or
//!   replacement boxes;
//! - a WordPiece piece that continues a word keeps its `##` (`##s`), and shows the
//!   characters of the text it covers (so `[UNK]` shows the word it replaced, and "The"
//!   stays "The" though the vocabulary holds "the");
//! - special tokens (`[CLS]`, `[SEP]`, `<|im_start|>`, a BOS) keep their own spelling.
//!
//! # Words
//!
//! A word is a maximal run of non-whitespace characters of the input text, as it was
//! typed: punctuation belongs to the word it touches ("mat." is one word of two pieces,
//! the lecture's "I love AI !" has four words because its "!" stands alone), and a
//! Korean word is an eojeol, the whitespace-delimited unit of a noun or verb with its
//! particles and endings ("고양이가" is one word), which is how the lecture's heatmap has
//! one cell per word. A token belongs to the word holding its first non-whitespace byte.
//! A token of only whitespace (a newline, a run of spaces) joins the word that follows it,
//! as byte-level BPE attaches a space to the word after it; at the end of the text, the
//! word before it. Every special token is a word of its own, even when written inside a
//! run of non-whitespace (`<|im_start|>user`). Words are therefore contiguous runs of
//! tokens that tile the sequence.

use std::ops::Range;

/// Shown for a space that begins a token (`␣love`).
pub const SPACE_MARK: char = '␣';
/// Shown for a newline.
pub const NEWLINE_MARK: char = '↵';
/// Shown for a tab.
pub const TAB_MARK: char = '⇥';
/// The label of a token that holds only the rest of a character begun on an earlier
/// token (U+22EF, not the ASCII "..." a text may contain).
pub const CONTINUATION_MARK: &str = "⋯";

/// One token of a tokenized text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Its id in the vocabulary.
    pub id: u32,
    /// Its spelling in the vocabulary: `Ġlove`, `##s`, `[CLS]`, `ê³`.
    pub raw: String,
    /// Its label, as figures and `model tokenize` show it (see the module docs): `␣love`,
    /// `##s`, `[CLS]`, `고`, or [`CONTINUATION_MARK`].
    pub text: String,
    /// The bytes it stands for: a byte-level BPE token's decoded bytes (which may be part
    /// of a multi-byte character), a WordPiece piece without its `##` (the vocabulary's
    /// normalised spelling), a special token's spelling.
    pub bytes: Vec<u8>,
    /// The byte range of the input text it covers; `None` for a token the tokenizer adds
    /// (`[CLS]`, `[SEP]`, a BOS).
    pub span: Option<Range<usize>>,
    /// A special (control) token.
    pub special: bool,
    /// The index of the word it belongs to (see the module docs).
    pub word: usize,
}

/// A whitespace-delimited word of the text, or a special token (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The word as typed (without the space before it), or a special token's spelling.
    pub text: String,
    /// Its tokens: the words' ranges tile `0..tokens.len()` in order.
    pub tokens: Range<usize>,
}

/// The words of `tokens`, whose spans index `text` (the text they were made from), in
/// order, from their `word` indices. A word's label is the text it covers without the
/// whitespace around it, a special token's spelling, or, for a word of only whitespace
/// (a text of nothing else), its marks.
pub fn words(text: &str, tokens: &[Token]) -> Vec<Word> {
    let mut out: Vec<Word> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match out.last_mut() {
            Some(w) if tokens[w.tokens.start].word == t.word => w.tokens.end = i + 1,
            _ => out.push(Word {
                text: String::new(),
                tokens: i..i + 1,
            }),
        }
    }
    for w in &mut out {
        w.text = word_label(text, &tokens[w.tokens.clone()]);
    }
    out
}

fn word_label(text: &str, tokens: &[Token]) -> String {
    if let [t] = tokens {
        if t.special {
            return t.raw.clone();
        }
    }
    let start = tokens
        .iter()
        .filter_map(|t| t.span.as_ref().map(|s| s.start))
        .min();
    let end = tokens
        .iter()
        .filter_map(|t| t.span.as_ref().map(|s| s.end))
        .max();
    let covered = match (start, end) {
        (Some(s), Some(e)) => {
            let (s, e) = (floor_char(text, s), ceil_char(text, e));
            text.get(s..e).unwrap_or_default()
        }
        _ => "",
    };
    let trimmed = covered.trim();
    if !trimmed.is_empty() {
        return trimmed.to_string();
    }
    if !covered.is_empty() {
        return covered.chars().map(visible).collect();
    }
    tokens.iter().map(|t| t.text.as_str()).collect()
}

fn floor_char(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_char(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// A token as a tokenizer produced it, before labelling.
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    pub id: u32,
    pub raw: String,
    pub bytes: Vec<u8>,
    pub span: Option<Range<usize>>,
    pub special: bool,
    /// A WordPiece piece that continues a word (`##`).
    pub continues: bool,
}

/// Whether byte `b` prints as itself in GPT-2's byte-level alphabet.
fn prints_as_itself(b: u32) -> bool {
    (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
}

/// GPT-2's byte-level alphabet, inverted: the byte a character of it stands for. Bytes
/// that print as themselves (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) keep their code point; the
/// other 68 are U+0100 onwards, in byte order (so `Ġ`, U+0120, is byte 0x20).
pub(crate) fn byte_of(c: char) -> Option<u8> {
    let c = c as u32;
    if c < 0x100 {
        return prints_as_itself(c).then_some(c as u8);
    }
    let n = (c - 0x100) as usize;
    (0u32..256)
        .filter(|&b| !prints_as_itself(b))
        .nth(n)
        .map(|b| b as u8)
}

/// The bytes a byte-level BPE token spells, or `None` when it holds a character outside
/// the byte alphabet (a special token's spelling).
pub(crate) fn byte_level_bytes(raw: &str) -> Option<Vec<u8>> {
    raw.chars().map(byte_of).collect()
}

/// The characters of `text` (start byte, character), for looking up a span's characters.
struct Chars(Vec<(usize, char)>);

impl Chars {
    fn new(text: &str) -> Self {
        Self(text.char_indices().collect())
    }

    /// Indices of the characters that share a byte with `span`.
    fn overlapping(&self, span: &Range<usize>) -> Range<usize> {
        let first = self
            .0
            .partition_point(|&(at, c)| at + c.len_utf8() <= span.start);
        let end = self.0.partition_point(|&(at, _)| at < span.end);
        first..end.max(first)
    }
}

/// Labels `pieces`, whose spans index `text`, and assigns their words.
pub(crate) fn finish(text: &str, pieces: Vec<Piece>) -> Vec<Token> {
    let chars = Chars::new(text);
    let owned = owned_chars(&chars, &pieces);
    let starts = word_starts(text, &chars, &pieces);
    let mut word = 0;
    pieces
        .into_iter()
        .zip(owned)
        .enumerate()
        .map(|(i, (p, own))| {
            if i > 0 && starts[i] {
                word += 1;
            }
            Token {
                id: p.id,
                text: label(&p, &own),
                raw: p.raw,
                bytes: p.bytes,
                span: p.span,
                special: p.special,
                word,
            }
        })
        .collect()
}

/// For each piece, the characters of the text it is the first to hold a byte of.
fn owned_chars(chars: &Chars, pieces: &[Piece]) -> Vec<String> {
    let mut taken = vec![false; chars.0.len()];
    pieces
        .iter()
        .map(|p| {
            let mut own = String::new();
            if let (false, Some(span)) = (p.special, &p.span) {
                for k in chars.overlapping(span) {
                    if !taken[k] {
                        taken[k] = true;
                        own.push(chars.0[k].1);
                    }
                }
            }
            own
        })
        .collect()
}

/// A character as a label shows it.
fn visible(c: char) -> char {
    match c {
        ' ' => SPACE_MARK,
        '\n' => NEWLINE_MARK,
        '\t' => TAB_MARK,
        // Other control characters as their pictures (U+2400..), DEL as ␡.
        c if (c as u32) < 0x20 => char::from_u32(0x2400 + c as u32).unwrap_or(SPACE_MARK),
        '\u{7F}' => '␡',
        c if c.is_whitespace() => SPACE_MARK,
        c => c,
    }
}

fn label(p: &Piece, own: &str) -> String {
    if p.special || p.span.is_none() {
        return p.raw.clone();
    }
    if own.is_empty() {
        return CONTINUATION_MARK.to_string();
    }
    let shown: String = own.chars().map(visible).collect();
    if p.continues {
        format!("##{shown}")
    } else {
        shown
    }
}

/// Where each piece's non-whitespace characters start and end in the text, if it has any.
fn content(chars: &Chars, span: &Range<usize>) -> Option<(usize, usize)> {
    let over = &chars.0[chars.overlapping(span)];
    let first = over.iter().find(|(_, c)| !c.is_whitespace())?;
    let last = over.iter().rev().find(|(_, c)| !c.is_whitespace())?;
    Some((first.0, last.0 + last.1.len_utf8()))
}

/// Whether each piece begins a new word (see the module docs).
fn word_starts(text: &str, chars: &Chars, pieces: &[Piece]) -> Vec<bool> {
    let mut starts = vec![false; pieces.len()];
    // The end of the open word's last non-whitespace character (None: no word is open),
    // and the first of a run of whitespace-only pieces waiting for the next word.
    let mut open: Option<usize> = None;
    let mut waiting: Option<usize> = None;
    for (i, p) in pieces.iter().enumerate() {
        if p.special {
            // Whitespace before a special token stays with the word before it, or is a
            // word of its own when there is none.
            if let (Some(w), None) = (waiting.take(), open) {
                starts[w] = true;
            }
            starts[i] = true;
            open = None;
            continue;
        }
        let Some(span) = &p.span else {
            // A piece that covers no text (none of the crate's tokenizers make one)
            // continues the open word.
            if open.is_none() {
                starts[waiting.take().unwrap_or(i)] = true;
            }
            continue;
        };
        let Some((at, end)) = content(chars, span) else {
            waiting.get_or_insert(i);
            continue;
        };
        let new_word = match open {
            None => true,
            Some(prev) => at >= prev && text[prev..at].chars().any(char::is_whitespace),
        };
        if new_word {
            starts[waiting.unwrap_or(i)] = true;
        }
        waiting = None;
        open = Some(open.map_or(end, |prev| if new_word { end } else { prev.max(end) }));
    }
    if let (Some(w), None) = (waiting, open) {
        starts[w] = true;
    }
    starts
}
