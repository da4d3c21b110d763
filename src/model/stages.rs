//! Time per stage of a forward pass (embeddings, projections, attention, ...), summed
//! over layers. On the GPU each stage is submitted and waited for on its own, so a timed
//! pass is slower in total than an untimed one; the split is what it is for.

/// Seconds per stage, in the order the stages first ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageTimes {
    entries: Vec<(&'static str, f64)>,
}

impl StageTimes {
    /// Adds `seconds` to `stage`.
    pub fn add(&mut self, stage: &'static str, seconds: f64) {
        match self.entries.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, t)) => *t += seconds,
            None => self.entries.push((stage, seconds)),
        }
    }

    /// `(stage, seconds)` in the order the stages first ran.
    pub fn entries(&self) -> &[(&'static str, f64)] {
        &self.entries
    }

    /// The sum over stages.
    pub fn total(&self) -> f64 {
        self.entries.iter().map(|(_, t)| t).sum()
    }
}

/// The models' one clock: a stopwatch that charges the time since its last lap to a
/// stage, and reads the time since it started (generation statistics). Timing needs a
/// clock, which wasm32 in the browser lacks here (`std::time::Instant` panics there):
/// there every lap is free and records nothing, and every reading is 0.
pub(crate) struct Clock {
    // Read by the native-only timed forward passes.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub times: StageTimes,
    #[cfg(not(target_arch = "wasm32"))]
    start: std::time::Instant,
    #[cfg(not(target_arch = "wasm32"))]
    last: std::time::Instant,
}

impl Clock {
    pub(crate) fn start() -> Self {
        #[cfg(not(target_arch = "wasm32"))]
        let now = std::time::Instant::now();
        Self {
            times: StageTimes::default(),
            #[cfg(not(target_arch = "wasm32"))]
            start: now,
            #[cfg(not(target_arch = "wasm32"))]
            last: now,
        }
    }

    /// Seconds since the clock started (0 on wasm32).
    pub(crate) fn seconds(&self) -> f64 {
        #[cfg(not(target_arch = "wasm32"))]
        return self.start.elapsed().as_secs_f64();
        #[cfg(target_arch = "wasm32")]
        0.0
    }

    /// Charges the time since the last lap to `stage`.
    pub(crate) fn lap(&mut self, stage: &'static str) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let now = std::time::Instant::now();
            self.times.add(stage, (now - self.last).as_secs_f64());
            self.last = now;
        }
        #[cfg(target_arch = "wasm32")]
        let _ = stage;
    }
}
