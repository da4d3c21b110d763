//! The forward of each kernel path.

pub(crate) mod from_lse;
pub(crate) mod one_pass;
pub(crate) mod split_kv;
pub(crate) mod staged;
