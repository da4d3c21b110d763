//! `.npy` files in and out. The header is read first so that the dtype picks the reader
//! and a file shorter or longer than its header promises is refused before any large
//! allocation. ndarray-npy reads the common dtypes; f16 is decoded here, since
//! ndarray-npy has no f16 element type.

use std::io::Cursor;
use std::path::Path;

use half::f16;
use ndarray::{ArrayD, IxDyn, ShapeBuilder};
use ndarray_npy::npy::header::{Header, ReadHeaderError};
use ndarray_npy::{ReadNpyExt, ReadableElement, WritableElement, WriteNpyExt};

use super::exit::CliError;
use super::io::output::{OutputSet, Slot};
use super::io::read::read_bounded;
use wgpu_attention::model::read_header_bytes;

/// A mask as read from disk: its dtype decides the kind.
pub enum MaskArray {
    Bool(ArrayD<bool>),
    Additive(ArrayD<f32>),
}

/// Byte order of a multi-byte dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

/// The dtypes this tool reads; anything else is named and refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dtype {
    F16(Endian),
    F32,
    F64,
    Bool,
    I32,
    I64,
}

impl Dtype {
    fn size(self) -> usize {
        match self {
            Self::Bool => 1,
            Self::F16(_) => 2,
            Self::F32 | Self::I32 => 4,
            Self::F64 | Self::I64 => 8,
        }
    }
}

/// What a flag reads: each accepts its own dtypes.
#[derive(Debug, Clone, Copy)]
enum Want {
    Floats,
    Mask,
    Lens,
    PaddingMask,
}

impl Want {
    fn accepts(self, d: Dtype) -> bool {
        let float = matches!(d, Dtype::F16(_) | Dtype::F32 | Dtype::F64);
        match self {
            Self::Floats => float,
            Self::Mask => float || d == Dtype::Bool,
            Self::Lens => matches!(d, Dtype::I32 | Dtype::I64),
            Self::PaddingMask => matches!(d, Dtype::Bool | Dtype::I32 | Dtype::I64),
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Self::Floats => "float32, float64 or float16",
            Self::Mask => "bool, float32, float64 or float16",
            Self::Lens => "int32 or int64",
            Self::PaddingMask => "bool, int32 or int64",
        }
    }
}

/// A parsed file: header facts plus the raw bytes, whose length has been checked.
struct Npy {
    dtype: Dtype,
    shape: Vec<usize>,
    fortran: bool,
    bytes: Vec<u8>,
    data_start: usize,
}

/// NumPy's name for a descriptor such as `<i4`, for messages.
fn numpy_name(desc: &str) -> String {
    let code = desc.trim_start_matches(['<', '>', '|', '=']);
    let name = match code {
        "b1" | "?" => "bool",
        "f2" | "e" => "float16",
        "f4" | "f" => "float32",
        "f8" | "d" => "float64",
        "i1" => "int8",
        "i2" => "int16",
        "i4" => "int32",
        "i8" => "int64",
        "u1" => "uint8",
        "u2" => "uint16",
        "u4" => "uint32",
        "u8" => "uint64",
        "c8" => "complex64",
        "c16" => "complex128",
        _ => return desc.to_string(),
    };
    name.to_string()
}

fn parse_dtype(desc: &str) -> Option<Dtype> {
    let (endian, code) = match desc.as_bytes().first()? {
        b'<' | b'|' | b'=' => (Endian::Little, &desc[1..]),
        b'>' => (Endian::Big, &desc[1..]),
        _ => (Endian::Little, desc),
    };
    // ndarray-npy reads only these spellings of the non-f16 types; `>` variants included.
    Some(match (desc, code) {
        (_, "f2") => Dtype::F16(endian),
        ("<f4" | ">f4", _) => Dtype::F32,
        ("<f8" | ">f8", _) => Dtype::F64,
        ("|b1", _) => Dtype::Bool,
        ("<i4" | ">i4", _) => Dtype::I32,
        ("<i8" | ">i8", _) => Dtype::I64,
        _ => return None,
    })
}

/// Reads the header, then the file bounded by what the header promises, and checks that
/// the dtype is one `want` accepts; a path that is not a regular file, or a file longer
/// or shorter than its header says, is refused before its data is read.
fn load(flag: &'static str, path: &Path, want: Want) -> Result<Npy, CliError> {
    let mut parsed = None;
    let bytes = read_bounded(flag, path, |r| {
        let prefix = header_bytes(r)?;
        let header = Header::from_reader(&mut Cursor::new(&prefix[..])).map_err(|e| {
            let why = match e {
                ReadHeaderError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    "the file ends inside the header".to_string()
                }
                e => e.to_string(),
            };
            format!("not a valid .npy file: {why}")
        })?;
        let dtype = accepted(&header, want)?;
        let need = header
            .shape
            .iter()
            .try_fold(dtype.size() as u64, |n, &d| n.checked_mul(d as u64))
            .and_then(|n| n.checked_add(prefix.len() as u64))
            .ok_or_else(|| format!("shape {:?} is too large", header.shape))?;
        parsed = Some((header, dtype, prefix.len()));
        Ok(need)
    })?;
    let (header, dtype, data_start) =
        parsed.ok_or_else(|| CliError::input(flag, "the header was not read"))?;
    Ok(Npy {
        dtype,
        shape: header.shape,
        fortran: header.layout.is_fortran(),
        bytes,
        data_start,
    })
}

/// The magic string, version, header length and header of a `.npy` file, read without
/// trusting the header length further than the file reaches.
fn header_bytes(r: &mut dyn std::io::Read) -> Result<Vec<u8>, String> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    let mut prefix = read_header_bytes(r, 8, "the header")?;
    if &prefix[..6] != MAGIC {
        return Err("not a valid .npy file: it does not start with \\x93NUMPY".into());
    }
    // Version 1 has a 2-byte header length; versions 2 and 3 a 4-byte one.
    let width = if prefix[6] == 1 { 2 } else { 4 };
    let len_bytes = read_header_bytes(r, width, "the header")?;
    let len = len_bytes
        .iter()
        .rev()
        .fold(0u64, |n, &b| (n << 8) | u64::from(b));
    prefix.extend(len_bytes);
    prefix.extend(read_header_bytes(r, len, "the header")?);
    Ok(prefix)
}

/// The dtype of `header` when `want` accepts it; otherwise the message naming it.
fn accepted(header: &Header, want: Want) -> Result<Dtype, String> {
    let not_accepted = |name: String| {
        format!(
            "dtype {name} {:?} is not accepted ({} expected)",
            header.shape,
            want.expected()
        )
    };
    match header.type_descriptor.as_string() {
        None => Err(not_accepted(format!(
            "{} (structured)",
            header.type_descriptor
        ))),
        Some(desc) => match parse_dtype(desc) {
            Some(d) if want.accepts(d) => Ok(d),
            _ => Err(not_accepted(numpy_name(desc))),
        },
    }
}

impl Npy {
    fn read<T: ReadableElement + Clone>(
        &self,
        flag: &'static str,
        path: &Path,
    ) -> Result<ArrayD<T>, CliError> {
        let a = ArrayD::<T>::read_npy(&self.bytes[..])
            .map_err(|e| CliError::input(flag, format!("cannot read {}: {e}", path.display())))?;
        Ok(standard(a))
    }

    fn read_f16(&self, endian: Endian, flag: &'static str) -> Result<ArrayD<f32>, CliError> {
        let data = self.bytes.get(self.data_start..).unwrap_or_default();
        let values: Vec<f32> = data
            .chunks_exact(2)
            .map(|c| {
                let b = [c[0], c[1]];
                match endian {
                    Endian::Little => f16::from_le_bytes(b),
                    Endian::Big => f16::from_be_bytes(b),
                }
                .to_f32()
            })
            .collect();
        let shape = IxDyn(&self.shape).set_f(self.fortran);
        let a = ArrayD::from_shape_vec(shape, values).map_err(|e| {
            CliError::input(
                flag,
                format!("float16 data does not fit shape {:?}: {e}", self.shape),
            )
        })?;
        Ok(standard(a))
    }

    /// Any float dtype, converted to f32. `load` has refused the others.
    fn floats(&self, flag: &'static str, path: &Path) -> Result<ArrayD<f32>, CliError> {
        match self.dtype {
            Dtype::F64 => self.read::<f64>(flag, path).map(|a| a.mapv(|x| x as f32)),
            Dtype::F16(endian) => self.read_f16(endian, flag),
            _ => self.read::<f32>(flag, path),
        }
    }
}

/// Row-major, so the library sees contiguous data whatever order the file used.
fn standard<T: Clone>(a: ArrayD<T>) -> ArrayD<T> {
    if a.is_standard_layout() {
        a
    } else {
        a.as_standard_layout().into_owned()
    }
}

/// A float tensor (f32, f64 or f16), as f32.
pub fn read_floats(flag: &'static str, path: &Path) -> Result<ArrayD<f32>, CliError> {
    load(flag, path, Want::Floats)?.floats(flag, path)
}

/// A boolean mask, or a float one read as additive.
pub fn read_mask(flag: &'static str, path: &Path) -> Result<MaskArray, CliError> {
    let npy = load(flag, path, Want::Mask)?;
    if npy.dtype == Dtype::Bool {
        return npy.read::<bool>(flag, path).map(MaskArray::Bool);
    }
    npy.floats(flag, path).map(MaskArray::Additive)
}

/// Per-batch key lengths: int32 or int64 of shape `(B,)`, none negative.
pub fn read_lens(flag: &'static str, path: &Path) -> Result<Vec<u32>, CliError> {
    let npy = load(flag, path, Want::Lens)?;
    let values: Vec<i64> = match npy.dtype {
        Dtype::I32 => npy
            .read::<i32>(flag, path)?
            .iter()
            .map(|&x| x.into())
            .collect(),
        _ => npy.read::<i64>(flag, path)?.into_iter().collect(),
    };
    if npy.shape.len() != 1 {
        return Err(CliError::input(
            flag,
            format!("expected shape (B,), got {:?}", npy.shape),
        ));
    }
    values
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            u32::try_from(n).map_err(|_| {
                let why = if n < 0 { "is negative" } else { "is too large" };
                CliError::input(flag, format!("kv_lens[{i}] = {n} {why}"))
            })
        })
        .collect()
}

/// A key padding mask in PyTorch's polarity: bool, or int32/int64 where nonzero means
/// true (this key is padding). Shape is checked by the caller.
pub fn read_padding_mask(flag: &'static str, path: &Path) -> Result<ArrayD<bool>, CliError> {
    let npy = load(flag, path, Want::PaddingMask)?;
    match npy.dtype {
        Dtype::Bool => npy.read::<bool>(flag, path),
        Dtype::I32 => Ok(npy.read::<i32>(flag, path)?.mapv(|x| x != 0)),
        _ => Ok(npy.read::<i64>(flag, path)?.mapv(|x| x != 0)),
    }
}

/// Writes an array (any rank) as a row-major `.npy` file into a claimed output.
pub fn write<T, D>(
    outputs: &mut OutputSet,
    slot: Slot,
    a: &ndarray::Array<T, D>,
) -> Result<(), CliError>
where
    T: WritableElement,
    D: ndarray::Dimension,
{
    outputs.write(slot, |w| {
        a.write_npy(w).map_err(|e| match e {
            ndarray_npy::WriteNpyError::Io(e) => e,
            e => std::io::Error::other(e),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes() {
        assert_eq!(parse_dtype("<f2"), Some(Dtype::F16(Endian::Little)));
        assert_eq!(parse_dtype(">f2"), Some(Dtype::F16(Endian::Big)));
        assert_eq!(parse_dtype("<f4"), Some(Dtype::F32));
        assert_eq!(parse_dtype("|b1"), Some(Dtype::Bool));
        assert_eq!(parse_dtype("<c8"), None);
        assert_eq!(parse_dtype(""), None);
        assert_eq!(numpy_name("<c16"), "complex128");
        assert_eq!(numpy_name("<U3"), "<U3");
    }
}
