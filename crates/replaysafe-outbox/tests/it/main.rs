mod end_to_end;
mod ops;
mod receiver;
mod staging;
mod support;
mod worker;
