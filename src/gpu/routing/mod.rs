//! Deciding how a call runs, before anything is recorded: the route table (`table.rs`:
//! which path serves a call, and its preparation), a configuration made a route
//! (`resolve.rs`), the probe of how many keys a driver lets one invocation loop over
//! (`budget.rs`) and the tuner (`tune/`). It sits above `forward/` because it decides by
//! measuring: the tuner and the probe record the paths they choose between into
//! zero-filled buffers and time or test them.

pub(crate) mod budget;
pub(crate) mod resolve;
pub(crate) mod table;
pub(crate) mod tune;
