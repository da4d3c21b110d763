//! From a validated problem to recorded commands. A [`call::Call`] is prepared once
//! (`route_table.rs` chooses and prepares the path, `resolve.rs` turns a configuration
//! into a [`route::Route`]), then recorded: uploads (`upload.rs`), the chunk plan
//! (`plan.rs`) and bindings (`chunk_bindings.rs`), and the forward of each path
//! (`paths/`). `io.rs` holds what every record function is handed.

pub(crate) mod call;
pub(crate) mod chunk_bindings;
pub(crate) mod io;
pub(crate) mod paths;
pub(crate) mod plan;
pub(crate) mod resolve;
pub(crate) mod route;
pub(crate) mod route_table;
pub(crate) mod upload;
