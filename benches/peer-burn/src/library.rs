//! What the benchmark needs of either library: inputs on its device, one call launched
//! and waited for, its output read back.

use crate::inputs::{Inputs, Shape};

pub trait Library {
    /// One shape's inputs and outputs on the library's device.
    type Prepared;

    /// The adapter the library's device runs on, in words.
    fn adapter(&self) -> String;

    fn prepare(&self, shape: &Shape, inputs: &Inputs) -> Result<Self::Prepared, String>;

    /// Which of the library's paths the call takes.
    fn path(&self, p: &Self::Prepared) -> String;

    /// One call, launched and waited for until the device is idle: the span a user waits
    /// for a result that stays on the device.
    fn run(&self, p: &Self::Prepared) -> Result<(), String>;

    /// One more call, read back to the host.
    fn read(&self, p: &Self::Prepared) -> Result<Vec<f32>, String>;
}
