mod end_to_end;
mod flow;
pub(crate) mod journal;
mod memory;
mod ops;
mod ordering;
#[cfg(feature = "postgres")]
mod postgres;
mod receiver;
mod staging;
mod support;
mod trust;
mod worker;
