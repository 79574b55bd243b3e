//! `hostile` built without the `log` import, so it loads without the `log`
//! grant: its stderr must then reach the host's log not at all. Same
//! config and attacks; what `hostile` would log is not written.

#[path = "../../hostile/src/lib.rs"]
mod hostile;
