//! Element-wise kernels of the fast CPU path, written so that the compiler vectorises
//! them: fixed-width lane arrays for reductions (a float sum or maximum does not
//! vectorise otherwise, as reordering it changes the result) and branch-free selects.
//! Each is `#[inline(always)]` so that it takes the target features of the function it
//! is inlined into (see `block.rs`: one copy per instruction set found at run time).

/// Lanes of the reductions: one AVX-512 register of f32, two AVX2 registers, four of
/// SSE or SIMD128.
const W: usize = 16;

/// `exp(x)` for `x <= 0`, `-inf` or NaN: the argument of every softmax exponential here
/// is a logit minus its row's maximum. Cephes' `expf` polynomial (about 1 ulp) after a
/// reduction by `ln 2`; below -87.5 (where `exp` leaves f32's normal range) and at
/// `-inf` it is exactly 0, as a masked key's weight must be; NaN stays NaN.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    // Clamped so that 2^n stays a normal number; NaN compares false and passes through.
    let c = if x < -87.5 { -87.5 } else { x };
    // Round to nearest by the 1.5 * 2^23 trick: no rounding instruction needed.
    const MAGIC: f32 = 12_582_912.0;
    let t = c * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    let r = c - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    // 2^n from t's bits, whose low bits hold n (t = 1.5 * 2^23 + n): n + 127, in [1, 127]
    // here, shifted into the exponent (the higher bits shift out). No float-to-integer
    // conversion, which would not vectorise. A NaN x leaves e NaN, whatever this is.
    let two_n = f32::from_bits(t.to_bits().wrapping_add(127) << 23);
    if x < -87.5 {
        0.0
    } else {
        e * two_n
    }
}

/// `a · b` over equal-length slices.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut s = [0f32; W];
    let (ca, cb) = (a.chunks_exact(W), b.chunks_exact(W));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for ((acc, &a), &b) in s.iter_mut().zip(x).zip(y) {
            *acc += a * b;
        }
    }
    let tail: f32 = ta.iter().zip(tb).map(|(x, y)| x * y).sum();
    s.iter().sum::<f32>() + tail
}

/// `acc += w * x`.
#[inline(always)]
pub(crate) fn axpy(acc: &mut [f32], w: f32, x: &[f32]) {
    for (a, &x) in acc.iter_mut().zip(x) {
        *a += w * x;
    }
}

/// `xs *= f`.
#[inline(always)]
pub(crate) fn scale(xs: &mut [f32], f: f32) {
    for x in xs {
        *x *= f;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std_over_its_domain() {
        let mut worst = 0f64;
        let mut x = -90.0f32;
        while x <= 0.0 {
            let want = f64::from(x).exp();
            let got = f64::from(exp_nonpositive(x));
            if x < -87.5 {
                assert_eq!(got, 0.0, "exp({x})");
            } else {
                worst = worst.max((got - want).abs() / want);
            }
            x += 0.001_37;
        }
        assert!(worst < 4e-7, "relative error {worst}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-2e4), 0.0);
        assert!(exp_nonpositive(f32::NAN).is_nan());
    }

    #[test]
    fn dot_sees_every_element() {
        for n in [0, 1, 15, 16, 17, 40] {
            let xs: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let ys: Vec<f32> = xs.iter().map(|x| x * 2.0).collect();
            let want: f32 = xs.iter().zip(&ys).map(|(a, b)| a * b).sum();
            assert!((dot(&xs, &ys) - want).abs() < 1e-5, "n = {n}");
        }
    }
}
