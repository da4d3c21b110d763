//! Wall time for generation statistics. `std::time::Instant` panics on
//! wasm32-unknown-unknown, so there the clock reads 0 and the browser measures itself.

#[cfg(not(target_arch = "wasm32"))]
pub(crate) struct Clock(std::time::Instant);

#[cfg(not(target_arch = "wasm32"))]
impl Clock {
    pub(crate) fn start() -> Self {
        Self(std::time::Instant::now())
    }

    pub(crate) fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) struct Clock;

#[cfg(target_arch = "wasm32")]
impl Clock {
    pub(crate) fn start() -> Self {
        Self
    }

    pub(crate) fn seconds(&self) -> f64 {
        0.0
    }
}
