//! Files in and out, safely: reads bounded by what a file's header promises, and
//! outputs that appear all together or not at all and never replace a link, a device
//! or a FIFO.

pub mod output;
pub mod read;
pub mod stdout;
pub mod target;
