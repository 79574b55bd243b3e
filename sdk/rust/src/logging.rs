//! Logging into the host's `tracing` (the `log` import): [`log`](crate::log)
//! and the [`info!`](crate::info) family of macros.

use crate::Level;

/// Sends one line to the host's log at `level` (the `log` import).
///
/// Prefer the [`info!`](crate::info) family of macros.
pub fn log(level: Level, message: &str) {
    crate::__private::before_visible_effect();
    crate::bindings::informer_host::plugin::log::log(level, message);
}

/// Logs a `format!` message at the given [`Level`].
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)+) => {
        $crate::log($level, &::std::format!($($arg)+))
    };
}

/// Logs a `format!` message at trace level.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Trace, $($arg)+) };
}

/// Logs a `format!` message at debug level.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Debug, $($arg)+) };
}

/// Logs a `format!` message at info level.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Info, $($arg)+) };
}

/// Logs a `format!` message at warn level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Warn, $($arg)+) };
}

/// Logs a `format!` message at error level.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log!($crate::Level::Error, $($arg)+) };
}
