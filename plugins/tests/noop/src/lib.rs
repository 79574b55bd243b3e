//! Does nothing: the benchmark baseline for the cost of a call.

#[derive(Default)]
struct Noop;

impl informer_guest::ResourceEventHandler for Noop {}

informer_guest::export_plugin!(Noop);
