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

/// A stopwatch that charges the time since its last lap to a stage. Timing needs a
/// clock, which wasm32 in the browser lacks here: there every lap is free and records
/// nothing.
pub(crate) struct Clock {
    pub times: StageTimes,
    #[cfg(not(target_arch = "wasm32"))]
    last: std::time::Instant,
}

impl Clock {
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn start() -> Self {
        Self {
            times: StageTimes::default(),
            last: std::time::Instant::now(),
        }
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
