//! A reader for GGUF files (the format of llama.cpp): the header, the metadata key/value
//! pairs, the tensor infos and where each tensor's bytes lie.
//!
//! [`parse`] takes the whole file as bytes and never panics: every length, count and
//! offset is checked against the bytes that remain before anything is allocated, so a
//! truncated or hostile file is a [`ModelError::Format`] naming what was being read.
//! Counts are checked against the smallest size their items can take, so a count of
//! 2^60 strings in a 100-byte file fails at once instead of reserving memory.
//!
//! Layout (little-endian): magic `GGUF`, version (2 or 3), tensor count (u64), metadata
//! count (u64), the metadata pairs, the tensor infos, padding to `general.alignment`
//! (default 32), then the data section; each tensor's offset is relative to it.

use crate::model::ModelError;

// The element type of a tensor, with its block layout, lives beside the dequantizers.
pub use crate::model::llama::quant::GgmlType;

/// The alignment of the data section and of each tensor when the file names none.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Nested arrays deeper than this are refused (a file could nest without end).
const MAX_ARRAY_DEPTH: usize = 4;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, when it is a float or an integer.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Where one tensor lies and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions innermost first, as ggml lists them (`dims[0]` is the row length).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements (checked against overflow when the file was parsed).
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF file borrowing its bytes.
#[derive(Debug, Clone)]
pub struct Gguf<'a> {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// The data section: from its aligned start to the end of the file.
    pub data: &'a [u8],
}

fn bad(detail: impl Into<String>) -> ModelError {
    ModelError::format("GGUF", detail)
}

/// A cursor that refuses to read past the end.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], ModelError> {
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.remaining())
            .ok_or_else(|| {
                bad(format!(
                    "truncated: {what} needs {n} bytes at offset {}, {} remain",
                    self.pos,
                    self.remaining()
                ))
            })?;
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], ModelError> {
        let s = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, ModelError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, ModelError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, ModelError> {
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| bad(format!("{what} is not UTF-8")))
    }

    /// Checks that `count` items of at least `min_size` bytes each can still follow.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<usize, ModelError> {
        let room = self.remaining() as u64 / min_size.max(1);
        if count > room {
            return Err(bad(format!(
                "{what}: a count of {count} cannot fit in the {} bytes that remain",
                self.remaining()
            )));
        }
        Ok(count as usize)
    }

    fn value(&mut self, ty: u32, depth: usize, what: &str) -> Result<Value, ModelError> {
        Ok(match ty {
            0 => Value::U8(u8::from_le_bytes(self.array(what)?)),
            1 => Value::I8(i8::from_le_bytes(self.array(what)?)),
            2 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            4 => Value::U32(self.u32(what)?),
            5 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            7 => match self.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(bad(format!("{what}: bool byte {b} is neither 0 nor 1"))),
            },
            8 => Value::String(self.string(what)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(bad(format!(
                        "{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}"
                    )));
                }
                let inner = self.u32(what)?;
                let count = self.u64(what)?;
                let n = self.check_count(count, min_value_size(inner), what)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(inner, depth + 1, what)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64(what)?),
            11 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            t => return Err(bad(format!("{what}: unknown value type {t}"))),
        })
    }
}

/// The fewest bytes a value of type `ty` takes (unknown types fail when read).
fn min_value_size(ty: u32) -> u64 {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        // A string or an array starts with a u64 length (an array also with its type).
        8 | 10..=12 => 8,
        9 => 12,
        _ => 1,
    }
}

/// Parses a whole GGUF file.
///
/// # Errors
/// [`ModelError::Format`] for a bad magic, an unsupported version, anything truncated,
/// a count or length the file cannot hold, a bad alignment, a tensor whose element
/// count overflows or whose bytes lie outside the file, or a duplicate tensor name.
pub fn parse(bytes: &[u8]) -> Result<Gguf<'_>, ModelError> {
    let mut r = Reader { bytes, pos: 0 };
    let magic = r.array::<4>("magic")?;
    if &magic != b"GGUF" {
        return Err(bad(format!("bad magic {magic:?}: not a GGUF file")));
    }
    let version = r.u32("version")?;
    if !(2..=3).contains(&version) {
        return Err(bad(format!("version {version} is not supported (2 or 3)")));
    }
    let tensor_count = r.u64("tensor count")?;
    let kv_count = r.u64("metadata count")?;
    // A key (8-byte length), a type (4) and the smallest value (1).
    let kv_n = r.check_count(kv_count, 13, "metadata count")?;
    let mut metadata = Vec::with_capacity(kv_n);
    for i in 0..kv_n {
        let key = r.string(&format!("metadata key {i}"))?;
        let ty = r.u32(&format!("type of {key}"))?;
        let value = r.value(ty, 0, &key)?;
        metadata.push((key, value));
    }
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => v
            .as_u64()
            .filter(|a| a.is_power_of_two())
            .ok_or_else(|| bad(format!("general.alignment {v:?} is not a power of two")))?,
    };
    // A name (8-byte length), a dimension count (4), a type (4) and an offset (8).
    let t_n = r.check_count(tensor_count, 24, "tensor count")?;
    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(t_n);
    for i in 0..t_n {
        tensors.push(tensor_info(&mut r, i)?);
    }
    let start = (r.pos as u64).next_multiple_of(alignment);
    let data = usize::try_from(start)
        .ok()
        .and_then(|s| bytes.get(s..))
        .unwrap_or(&[]);
    let mut names = std::collections::HashSet::new();
    for t in &tensors {
        if !names.insert(t.name.as_str()) {
            return Err(bad(format!("tensor {} appears twice", t.name)));
        }
        check_placement(t, alignment, data.len() as u64)?;
    }
    Ok(Gguf {
        version,
        metadata,
        tensors,
        alignment,
        data,
    })
}

fn tensor_info(r: &mut Reader<'_>, i: usize) -> Result<TensorInfo, ModelError> {
    let name = r.string(&format!("name of tensor {i}"))?;
    let n_dims = r.u32(&format!("dimension count of {name}"))?;
    if n_dims == 0 || n_dims > 4 {
        return Err(bad(format!(
            "{name}: {n_dims} dimensions (ggml has 1 to 4)"
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(r.u64(&format!("dimensions of {name}"))?);
    }
    if dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .is_none()
    {
        return Err(bad(format!(
            "{name}: dimensions {dims:?} overflow an element count"
        )));
    }
    let ty = GgmlType(r.u32(&format!("type of {name}"))?);
    let offset = r.u64(&format!("offset of {name}"))?;
    Ok(TensorInfo {
        name,
        dims,
        ty,
        offset,
    })
}

/// Checks the offset's alignment and, for types with a known size, that the bytes lie
/// inside the data section (other types fail when dequantized, naming the type).
fn check_placement(t: &TensorInfo, alignment: u64, data_len: u64) -> Result<(), ModelError> {
    if !t.offset.is_multiple_of(alignment) {
        return Err(bad(format!(
            "{}: offset {} is not a multiple of the alignment {alignment}",
            t.name, t.offset
        )));
    }
    if t.ty.block().is_some() {
        let size = tensor_bytes(t)?;
        let end = t.offset.checked_add(size);
        if end.is_none_or(|e| e > data_len) {
            return Err(bad(format!(
                "{}: {size} bytes at offset {} lie past the end of the data section ({data_len} bytes)",
                t.name, t.offset
            )));
        }
    }
    Ok(())
}

/// Bytes of `t`'s data, for the types this crate reads.
///
/// # Errors
/// [`ModelError::Unsupported`] for another type; [`ModelError::Format`] when the row
/// length is not a whole number of blocks.
pub fn tensor_bytes(t: &TensorInfo) -> Result<u64, ModelError> {
    let (per_block, block_bytes) = t.ty.block().ok_or_else(|| unsupported(t))?;
    let row = t.dims.first().copied().unwrap_or(1);
    if !row.is_multiple_of(per_block) {
        return Err(bad(format!(
            "{}: rows of {row} elements are not whole {} blocks of {per_block}",
            t.name,
            t.ty.name()
        )));
    }
    // The element count fits u64 (checked at parse); bytes per block / elements per
    // block is at most 4, so this cannot overflow for a count the file could hold.
    (t.elements() / per_block)
        .checked_mul(block_bytes)
        .ok_or_else(|| bad(format!("{}: size overflows", t.name)))
}

fn unsupported(t: &TensorInfo) -> ModelError {
    ModelError::Unsupported(format!(
        "tensor {} has type {}; this crate reads {}",
        t.name,
        t.ty.name(),
        crate::model::llama::quant::SUPPORTED
    ))
}

impl<'a> Gguf<'a> {
    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw bytes of `t`.
    ///
    /// # Errors
    /// As [`tensor_bytes`].
    pub fn tensor_data(&self, t: &TensorInfo) -> Result<&'a [u8], ModelError> {
        let size = tensor_bytes(t)?;
        // Placement was checked at parse time; checked again here for a hand-made info.
        let start = usize::try_from(t.offset).ok();
        let end = t
            .offset
            .checked_add(size)
            .and_then(|e| usize::try_from(e).ok());
        match (start, end) {
            (Some(s), Some(e)) if e <= self.data.len() => Ok(&self.data[s..e]),
            _ => Err(bad(format!("{}: bytes lie outside the file", t.name))),
        }
    }

    /// The tensor's values as f32, dequantized as ggml defines each type.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming the tensor and its type for a type other than
    /// those of [`crate::model::llama::quant::SUPPORTED`]; as [`Gguf::tensor_data`] otherwise.
    pub fn dequantize(&self, t: &TensorInfo) -> Result<Vec<f32>, ModelError> {
        let bytes = self.tensor_data(t)?;
        Ok(crate::model::llama::quant::dequantize(t.ty, bytes))
    }
}
