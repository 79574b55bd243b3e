//! Controllers: the [`Reconciler`] trait, [`Action`], the
//! [`export_controller!`](crate::export_controller) macro that exports a
//! reconciler as the `controller` world, and the imports only controllers
//! have: [`kube`] (writes), [`stores`] (every watched informer's cache, by
//! name) and [`queue`] (more reconciles).
//!
//! A controller is level-driven: the host calls [`Reconciler::reconcile`]
//! with the key (`namespace/name`, or `name`) of an object of its primary
//! informer whenever that object, or a secondary object that maps to it,
//! changes, and on every resync. `reconcile` reads the current state from the
//! caches, compares it with the desired state, and writes only the
//! difference, so calling it again when nothing changed writes nothing. The
//! host's workqueue never runs one key in two instances at once; an `Err` (or
//! a panic) requeues the key with exponential backoff.

use std::time::Duration;

use crate::{Config, Object};

pub mod kube;
pub mod queue;
pub mod stores;

/// Bindings generated for the `controller` world (not part of the stable
/// API). The interfaces it shares with handler plugins (`types`, `log`,
/// `cache`) are the handler bindings' own, so [`Object`] is one type.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "controller",
        path: "../../wit",
        with: {
            "informer-host:plugin/types@0.1.0": informer_guest::bindings::informer_host::plugin::types,
            "informer-host:plugin/log@0.1.0": informer_guest::bindings::informer_host::plugin::log,
            "informer-host:plugin/cache@0.1.0": informer_guest::bindings::informer_host::plugin::cache,
        },
        pub_export_macro: true,
        export_macro_name: "__export_controller_bindings",
        default_bindings_module: "informer_guest::controller::bindings",
        runtime_path: "informer_guest::__private::wit_bindgen::rt",
    });
}

/// What to do with a key after a successful reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the next change; the key's failures are forgotten.
    Done,
    /// Reconcile the key again after this long (rounded up to a
    /// millisecond), e.g. to poll something no informer watches.
    RequeueAfter(Duration),
}

impl From<Action> for crate::__private::RawAction {
    fn from(action: Action) -> Self {
        match action {
            Action::Done => Self::Done,
            Action::RequeueAfter(after) => Self::RequeueAfter(millis(after)),
        }
    }
}

/// `after` in whole milliseconds, rounded up (a sub-millisecond delay is
/// not "now") and saturating.
pub(crate) fn millis(after: Duration) -> u64 {
    u64::try_from(after.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// A controller, implemented by the plugin's own type.
///
/// The value is created with [`Default`] when the host calls `init`, then
/// [`init`](Self::init) configures it. The host may run several instances
/// of one controller (`max_concurrent_reconciles`) and replaces an instance
/// that trapped, so state kept in the value is a per-instance cache, never
/// the truth: the truth is in the informers' caches.
pub trait Reconciler: Default + 'static {
    /// Called once per instance with the plugin's configuration.
    fn init(&mut self, config: &Config) -> Result<(), String> {
        let _ = config;
        Ok(())
    }

    /// Brings the object with `key` to its desired state. It may no longer
    /// exist (it was deleted): then clean up what the owner references of
    /// its children do not, or do nothing. An `Err` is logged and requeues
    /// the key with rate-limited backoff.
    fn reconcile(&mut self, key: &str) -> Result<Action, String>;

    /// The keys of the primary resource to reconcile because `obj` of the
    /// secondary informer `informer` changed. The host calls it only for
    /// informers configured to be mapped by the plugin (others map through
    /// owner references or labels, in the host). The default maps nothing.
    fn map(&mut self, informer: &str, obj: &Object) -> Vec<String> {
        let _ = (informer, obj);
        Vec::new()
    }
}

/// Exports a [`Reconciler`] type as the component's `reconciler`. Use it
/// once, at the crate root of a `cdylib`.
///
/// ```no_run
/// use informer_guest::controller::{Action, Reconciler};
///
/// #[derive(Default)]
/// struct MyController;
/// impl Reconciler for MyController {
///     fn reconcile(&mut self, _key: &str) -> Result<Action, String> {
///         Ok(Action::Done)
///     }
/// }
/// informer_guest::export_controller!(MyController);
/// ```
#[macro_export]
macro_rules! export_controller {
    ($ty:ty) => {
        const _: () = {
            ::std::thread_local! {
                static __INFORMER_GUEST_STATE: $crate::__private::State<$ty> = const { $crate::__private::State::new() };
            }

            struct __InformerGuestExport;

            impl $crate::controller::bindings::exports::informer_host::plugin::reconciler::Guest
                for __InformerGuestExport
            {
                fn init(config: ::std::string::String) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::init_controller(&__INFORMER_GUEST_STATE, config)
                }

                fn reconcile(
                    key: ::std::string::String,
                ) -> ::core::result::Result<$crate::__private::RawAction, ::std::string::String> {
                    $crate::__private::reconcile(&__INFORMER_GUEST_STATE, key)
                }

                fn map(
                    informer: ::std::string::String,
                    obj: $crate::__private::RawObject,
                ) -> ::std::vec::Vec<::std::string::String> {
                    $crate::__private::map(&__INFORMER_GUEST_STATE, informer, obj)
                }
            }

            $crate::controller::bindings::__export_controller_bindings!(
                __InformerGuestExport with_types_in $crate::controller::bindings
            );
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requeue_delays_round_up_to_a_millisecond_and_saturate() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::from_nanos(1_000_001)), 2);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
