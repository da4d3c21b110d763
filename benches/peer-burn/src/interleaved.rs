//! Both libraries in this one process, calls alternating (`--mode interleaved`).
//!
//! burn's device-service threads (cubecl-common's `DS*` threads) spin and wake every
//! 150 µs while idle, which kept about a third of a core busy on 2-core lavapipe runs; in
//! this mode that load also lands on this crate's calls, so it is kept to show the effect,
//! not as the comparison.

use crate::burn_side::Burn;
use crate::inputs::{Inputs, Shape};
use crate::library::Library;
use crate::ours::Ours;
use crate::report::Side;
use crate::{Args, Measured, time_ms};

pub fn measure(ours: &Ours, burn: &Burn, shape: &Shape, args: &Args) -> Result<Measured, String> {
    let inputs = Inputs::new(shape)?;
    let op = ours.prepare(shape, &inputs)?;
    let bp = burn.prepare(shape, &inputs)?;

    // First calls: shader compilation and each library's tuning.
    let burn_first = time_ms(|| burn.run(&bp))?;
    let ours_first = time_ms(|| ours.run(&op))?;
    eprintln!("  first call: ours {ours_first:.0} ms, burn {burn_first:.0} ms");
    for _ in 1..args.warmup {
        burn.run(&bp)?;
        ours.run(&op)?;
    }
    let (mut tb, mut to) = (Vec::new(), Vec::new());
    for i in 0..args.iters {
        // Alternate which goes first, so neither always follows the other's work.
        if i % 2 == 0 {
            tb.push(time_ms(|| burn.run(&bp))?);
            to.push(time_ms(|| ours.run(&op))?);
        } else {
            to.push(time_ms(|| ours.run(&op))?);
            tb.push(time_ms(|| burn.run(&bp))?);
        }
    }
    let flops = shape.flops();
    Ok(Measured {
        inputs,
        ours_path: ours.path(&op),
        ours: Side::from_samples(ours_first, to, flops),
        burn: Side::from_samples(burn_first, tb, flops),
        ours_out: ours.read(&op)?,
        burn_out: burn.read(&bp)?,
    })
}
