//! From a validated problem to recorded commands: routes, planning, chunk bindings,
//! uploads, and the forwards of each path.

pub(crate) mod chunk_bindings;
pub(crate) mod paths;
pub(crate) mod plan;
pub(crate) mod route_table;
pub(crate) mod upload;
