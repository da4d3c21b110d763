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

/// Reads the file and its header, and checks that the dtype is one `want` accepts and that
/// the data is exactly as long as the header says.
fn load(flag: &'static str, path: &Path, want: Want) -> Result<Npy, CliError> {
    let shown = path.display();
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::input(flag, format!("cannot read {shown}: {e}")))?;
    let mut cursor = Cursor::new(&bytes[..]);
    let header = Header::from_reader(&mut cursor).map_err(|e| {
        let why = match e {
            ReadHeaderError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                "the file ends inside the header".to_string()
            }
            e => e.to_string(),
        };
        CliError::input(flag, format!("{shown} is not a valid .npy file: {why}"))
    })?;
    let data_start = usize::try_from(cursor.position()).unwrap_or(usize::MAX);
    let not_accepted = |name: String| {
        CliError::input(
            flag,
            format!(
                "{shown}: dtype {name} {:?} is not accepted ({} expected)",
                header.shape,
                want.expected()
            ),
        )
    };
    let dtype = match header.type_descriptor.as_string() {
        None => {
            return Err(not_accepted(format!(
                "{} (structured)",
                header.type_descriptor
            )))
        }
        Some(desc) => match parse_dtype(desc) {
            Some(d) if want.accepts(d) => d,
            _ => return Err(not_accepted(numpy_name(desc))),
        },
    };
    let need = header
        .shape
        .iter()
        .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            CliError::input(
                flag,
                format!("{shown}: shape {:?} is too large", header.shape),
            )
        })?;
    let have = bytes.len().saturating_sub(data_start);
    if have < need {
        return Err(CliError::input(
            flag,
            format!(
                "{shown} is truncated: shape {:?} needs {need} bytes of data, the file has {have}",
                header.shape
            ),
        ));
    }
    if have > need {
        return Err(CliError::input(
            flag,
            format!(
                "{shown}: {} bytes after the data of shape {:?}",
                have - need,
                header.shape
            ),
        ));
    }
    Ok(Npy {
        dtype,
        shape: header.shape,
        fortran: header.layout.is_fortran(),
        bytes,
        data_start,
    })
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

/// Writes an f32 array (any rank) as a row-major `.npy` file.
pub fn write<T, D>(
    flag: &'static str,
    path: &Path,
    a: &ndarray::Array<T, D>,
) -> Result<(), CliError>
where
    T: WritableElement,
    D: ndarray::Dimension,
{
    let fail = |e: &dyn std::fmt::Display| {
        CliError::input(flag, format!("cannot write {}: {e}", path.display()))
    };
    let file = std::fs::File::create(path).map_err(|e| fail(&e))?;
    let mut writer = std::io::BufWriter::new(file);
    a.write_npy(&mut writer).map_err(|e| fail(&e))?;
    std::io::Write::flush(&mut writer).map_err(|e| fail(&e))
}

/// Fails early, before any work, when an output's directory does not exist.
pub fn check_writable(flag: &'static str, path: &Path) -> Result<(), CliError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if dir.is_dir() {
        Ok(())
    } else {
        Err(CliError::input(
            flag,
            format!(
                "cannot write {}: directory {} does not exist",
                path.display(),
                dir.display()
            ),
        ))
    }
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
