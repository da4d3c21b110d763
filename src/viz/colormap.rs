//! The sequential colour scale: white for weight 0, dark blue for weight 1, monotone in
//! every channel so that a colour maps back to exactly one weight. And the diverging
//! scale of differences: white for 0, red towards +1, blue towards −1, each side monotone
//! in every channel so that a colour maps back to exactly one signed value.

/// The colour of a masked cell (weight exactly 0): black, outside the scale.
pub const MASKED_RGB: [u8; 3] = [0, 0, 0];

/// Stops of the scale (ColorBrewer's "Blues", light to dark); every channel decreases.
const STOPS: [[f64; 3]; 5] = [
    [255.0, 255.0, 255.0],
    [198.0, 219.0, 239.0],
    [107.0, 174.0, 214.0],
    [33.0, 113.0, 181.0],
    [8.0, 48.0, 107.0],
];

/// 256 levels of the scale; level `n` stands for weight `n / 255`.
#[derive(Debug, Clone)]
pub struct ColorScale {
    levels: [[u8; 3]; 256],
}

impl Default for ColorScale {
    fn default() -> Self {
        Self::new()
    }
}

impl ColorScale {
    pub fn new() -> Self {
        let mut levels = [[0u8; 3]; 256];
        for (n, level) in levels.iter_mut().enumerate() {
            let t = n as f64 / 255.0 * (STOPS.len() - 1) as f64;
            let seg = (t.floor() as usize).min(STOPS.len() - 2);
            let f = t - seg as f64;
            for c in 0..3 {
                let v = STOPS[seg][c] + (STOPS[seg + 1][c] - STOPS[seg][c]) * f;
                level[c] = v.round() as u8;
            }
        }
        Self { levels }
    }

    /// The colour of `weight` (clamped to [0, 1]; NaN draws as 0).
    pub fn rgb(&self, weight: f32) -> [u8; 3] {
        self.levels[Self::level(weight)]
    }

    /// The level (0..=255) that `weight` is drawn with.
    pub fn level(weight: f32) -> usize {
        let w = if weight.is_nan() {
            0.0
        } else {
            weight.clamp(0.0, 1.0)
        };
        (w * 255.0).round() as usize
    }

    /// The weight a drawn colour stands for: the nearest level's `n / 255` (levels that
    /// round to the same colour give their middle), or `None` for the masked colour.
    pub fn weight_of(&self, rgb: [u8; 3]) -> Option<f32> {
        if rgb == MASKED_RGB {
            return None;
        }
        let dist = |l: &[u8; 3]| {
            (0..3)
                .map(|c| (l[c] as i32 - rgb[c] as i32).pow(2))
                .sum::<i32>()
        };
        let best = self.levels.iter().map(dist).min()?;
        let hits: Vec<usize> = (0..256)
            .filter(|&n| dist(&self.levels[n]) == best)
            .collect();
        let mid = (hits[0] + hits[hits.len() - 1]) as f32 / 2.0;
        Some(mid / 255.0)
    }

    /// CSS hex of a colour.
    pub fn hex(rgb: [u8; 3]) -> String {
        format!("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2])
    }

    /// Whether text on this colour should be white (dark background) rather than black.
    pub fn wants_light_text(rgb: [u8; 3]) -> bool {
        let luma = 0.299 * rgb[0] as f64 + 0.587 * rgb[1] as f64 + 0.114 * rgb[2] as f64;
        luma < 128.0
    }
}

/// The positive side of the diverging scale, from 0 outwards (ColorBrewer's "RdBu", red
/// half); every channel decreases.
const POSITIVE_STOPS: [[f64; 3]; 5] = [
    [255.0, 255.0, 255.0],
    [253.0, 219.0, 199.0],
    [244.0, 165.0, 130.0],
    [214.0, 96.0, 77.0],
    [178.0, 24.0, 43.0],
];

/// The negative side, from 0 outwards (the blue half); every channel decreases.
const NEGATIVE_STOPS: [[f64; 3]; 5] = [
    [255.0, 255.0, 255.0],
    [209.0, 229.0, 240.0],
    [146.0, 197.0, 222.0],
    [67.0, 147.0, 195.0],
    [33.0, 102.0, 172.0],
];

/// Levels on each side of 0 of the diverging scale.
const SIDE_LEVELS: usize = 255;

/// The diverging scale of signed differences in [−1, 1]: 0 is white, +1 dark red, −1
/// dark blue; 255 levels each side, level `n` of a side standing for `±n / 255`.
#[derive(Debug, Clone)]
pub struct DivergingScale {
    positive: [[u8; 3]; SIDE_LEVELS + 1],
    negative: [[u8; 3]; SIDE_LEVELS + 1],
}

impl Default for DivergingScale {
    fn default() -> Self {
        Self::new()
    }
}

fn side(stops: &[[f64; 3]; 5]) -> [[u8; 3]; SIDE_LEVELS + 1] {
    let mut levels = [[0u8; 3]; SIDE_LEVELS + 1];
    for (n, level) in levels.iter_mut().enumerate() {
        let t = n as f64 / SIDE_LEVELS as f64 * (stops.len() - 1) as f64;
        let seg = (t.floor() as usize).min(stops.len() - 2);
        let f = t - seg as f64;
        for c in 0..3 {
            let v = stops[seg][c] + (stops[seg + 1][c] - stops[seg][c]) * f;
            level[c] = v.round() as u8;
        }
    }
    levels
}

impl DivergingScale {
    /// The colour of 0: white.
    pub const NEUTRAL_RGB: [u8; 3] = [255, 255, 255];
    /// The colour of +1 (and beyond).
    pub const POSITIVE_RGB: [u8; 3] = [178, 24, 43];
    /// The colour of −1 (and beyond).
    pub const NEGATIVE_RGB: [u8; 3] = [33, 102, 172];

    pub fn new() -> Self {
        Self {
            positive: side(&POSITIVE_STOPS),
            negative: side(&NEGATIVE_STOPS),
        }
    }

    /// The signed level of `t` (clamped to [−1, 1]; NaN draws as 0): −255..=255.
    pub fn level(t: f32) -> i32 {
        let t = if t.is_nan() { 0.0 } else { t.clamp(-1.0, 1.0) };
        (t * SIDE_LEVELS as f32).round() as i32
    }

    /// The colour of `t`, a difference divided by the scale's range.
    pub fn rgb(&self, t: f32) -> [u8; 3] {
        let n = Self::level(t);
        if n >= 0 {
            self.positive[n as usize]
        } else {
            self.negative[n.unsigned_abs() as usize]
        }
    }

    /// The value in [−1, 1] a drawn colour stands for: the nearest level's `±n / 255`
    /// (levels that round to the same colour give their middle).
    pub fn value_of(&self, rgb: [u8; 3]) -> f32 {
        let dist = |l: &[u8; 3]| {
            (0..3)
                .map(|c| (l[c] as i32 - rgb[c] as i32).pow(2))
                .sum::<i32>()
        };
        let all = (-(SIDE_LEVELS as i32)..=SIDE_LEVELS as i32).map(|n| {
            let l = if n >= 0 {
                &self.positive[n as usize]
            } else {
                &self.negative[n.unsigned_abs() as usize]
            };
            (n, dist(l))
        });
        let all: Vec<(i32, i32)> = all.collect();
        let best = all.iter().map(|&(_, d)| d).min().unwrap_or(0);
        let hits: Vec<i32> = all
            .iter()
            .filter(|&&(_, d)| d == best)
            .map(|&(n, _)| n)
            .collect();
        let mid = (hits[0] + hits[hits.len() - 1]) as f32 / 2.0;
        mid / SIDE_LEVELS as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_reads_back_within_one_level() {
        let scale = ColorScale::new();
        for n in 0..256 {
            let w = n as f32 / 255.0;
            let back = scale.weight_of(scale.rgb(w)).unwrap();
            assert!((back - w).abs() <= 1.0 / 255.0, "level {n}: {back} vs {w}");
        }
    }

    #[test]
    fn the_scale_darkens_monotonically_and_never_reaches_the_masked_colour() {
        let scale = ColorScale::new();
        for n in 1..256 {
            let (a, b) = (scale.levels[n - 1], scale.levels[n]);
            assert!(
                (0..3).all(|c| b[c] <= a[c]),
                "level {n} is lighter than {}",
                n - 1
            );
        }
        assert!(scale.levels.iter().all(|l| *l != MASKED_RGB));
        assert_eq!(scale.weight_of(MASKED_RGB), None);
    }

    #[test]
    fn the_diverging_scale_is_white_at_0_its_ends_at_plus_and_minus_1_and_monotone() {
        let scale = DivergingScale::new();
        assert_eq!(scale.rgb(0.0), DivergingScale::NEUTRAL_RGB);
        assert_eq!(scale.rgb(-0.0), DivergingScale::NEUTRAL_RGB);
        assert_eq!(scale.rgb(f32::NAN), DivergingScale::NEUTRAL_RGB);
        assert_eq!(scale.rgb(1.0), DivergingScale::POSITIVE_RGB);
        assert_eq!(scale.rgb(-1.0), DivergingScale::NEGATIVE_RGB);
        assert_eq!(scale.rgb(7.0), DivergingScale::POSITIVE_RGB, "clamped");
        assert_eq!(scale.rgb(-7.0), DivergingScale::NEGATIVE_RGB, "clamped");
        // Away from 0 every channel darkens on both sides.
        for n in 1..=255 {
            for sign in [1.0f32, -1.0] {
                let (a, b) = (
                    scale.rgb(sign * (n - 1) as f32 / 255.0),
                    scale.rgb(sign * n as f32 / 255.0),
                );
                assert!(
                    (0..3).all(|c| b[c] <= a[c]),
                    "{sign} level {n}: {b:?} after {a:?}"
                );
            }
        }
        // The sides differ, so the sign reads back; every level within one level.
        for n in -255..=255 {
            let t = n as f32 / 255.0;
            let back = scale.value_of(scale.rgb(t));
            assert!((back - t).abs() <= 1.0 / 255.0, "level {n}: {back} vs {t}");
        }
    }
}
