//! The pure core of kubectl-alfred: no client, no clock, no I/O. Time comes in as a value,
//! the world as a [`snapshot::Snapshot`].

pub mod api;
