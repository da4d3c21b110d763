//! Host arrays whose size comes from the caller: the element count is checked for
//! overflow, the bytes against the memory the machine has free, and the allocation is
//! fallible, so an input too large for this machine is an [`AttentionError::TooLarge`]
//! instead of an abort ("memory allocation failed") or a panic in ndarray.

use ndarray::{Array, Dimension};

use crate::error::{AttentionError, Result};

/// Elements of `shape`, or `TooLarge` naming `arg` when the count overflows.
pub(crate) fn elements(arg: &'static str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| AttentionError::TooLarge {
            arg,
            detail: format!("shape {shape:?} has more elements than memory can address"),
        })
}

/// Checks that `bytes` more of host memory can be held: below `isize::MAX` (Rust's
/// limit for one allocation) and, where the system says, below the memory available now.
///
/// # Errors
/// [`AttentionError::TooLarge`] naming `arg`.
pub(crate) fn check_host_bytes(arg: &'static str, what: &str, bytes: u64) -> Result<()> {
    let limit = available_bytes().unwrap_or(isize::MAX as u64);
    if bytes > limit.min(isize::MAX as u64) {
        return Err(AttentionError::TooLarge {
            arg,
            detail: format!(
                "{what} needs {bytes} bytes of host memory, more than the {limit} available"
            ),
        });
    }
    Ok(())
}

/// Bytes of `n` elements of `T`, saturating (a saturated count fails every check).
pub(crate) fn bytes_of<T>(n: usize) -> u64 {
    (n as u64).saturating_mul(std::mem::size_of::<T>() as u64)
}

/// A zero-filled array of `shape`, allocated fallibly.
///
/// # Errors
/// [`AttentionError::TooLarge`] naming `arg` when the count overflows, the machine has
/// not that much memory free, or the allocation fails.
pub(crate) fn try_zeros<T, D>(arg: &'static str, shape: D) -> Result<Array<T, D>>
where
    T: Clone + Default,
    D: Dimension,
{
    let n = elements(arg, shape.slice())?;
    let dims = shape.slice().to_vec();
    let values = try_vec(arg, &dims, n, T::default())?;
    Array::from_shape_vec(shape, values).map_err(|e| AttentionError::TooLarge {
        arg,
        detail: format!("shape {dims:?}: {e}"),
    })
}

/// A vector of `n` copies of `fill`, allocated fallibly. `shape` is for the message.
///
/// # Errors
/// As [`try_zeros`].
pub(crate) fn try_vec<T: Clone>(
    arg: &'static str,
    shape: &[usize],
    n: usize,
    fill: T,
) -> Result<Vec<T>> {
    check_host_bytes(arg, &format!("shape {shape:?}"), bytes_of::<T>(n))?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|e| AttentionError::TooLarge {
            arg,
            detail: format!(
                "shape {shape:?}: cannot allocate {} bytes: {e}",
                bytes_of::<T>(n)
            ),
        })?;
    v.resize(n, fill);
    Ok(v)
}

/// Memory the system can give now without swapping (Linux `MemAvailable`); `None`
/// where the system does not say.
fn available_bytes() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflowing_and_huge_shapes_are_errors() {
        assert!(elements("q", &[usize::MAX, 2]).is_err());
        let e = try_zeros::<f32, _>("q", ndarray::Ix4(1 << 20, 1 << 20, 1 << 10, 1)).unwrap_err();
        assert!(
            matches!(e, AttentionError::TooLarge { arg: "q", .. }),
            "{e}"
        );
        let a = try_zeros::<f32, _>("q", ndarray::Ix2(2, 3)).unwrap();
        assert_eq!(a.shape(), [2, 3]);
    }
}
