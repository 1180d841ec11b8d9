mod ops;
mod staging;
mod support;
mod worker;
