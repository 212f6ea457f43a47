//! Helpers shared by the slow test suites.

pub mod llamacpp;
