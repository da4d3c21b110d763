//! The sequential colour scale: white for weight 0, dark blue for weight 1, monotone in
//! every channel so that a colour maps back to exactly one weight.

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
}
