//! From a validated problem to recorded commands. A [`call::Call`] is prepared once
//! (`route_table.rs` chooses and prepares the path, `resolve.rs` turns a configuration
//! into a [`route::Route`]), then recorded: uploads (`upload.rs`), the chunk plan
//! (`kernels/plan.rs`) and bindings (`chunk_bindings.rs`), and the forward of each path
//! (`paths/`). `io.rs` holds what every record function is handed. Choosing among
//! configurations lives here too, since it runs the paths it chooses between: the
//! tuner (`tune/`, timing candidates on zero-filled buffers from `zero_run.rs`) and
//! the probe of how many keys a driver lets one invocation loop over (`budget.rs`).

pub(crate) mod budget;
pub(crate) mod call;
pub(crate) mod chunk_bindings;
pub(crate) mod io;
pub(crate) mod paths;
pub(crate) mod resolve;
pub(crate) mod route;
pub(crate) mod route_table;
pub(crate) mod tune;
pub(crate) mod upload;
pub(crate) mod zero_run;
