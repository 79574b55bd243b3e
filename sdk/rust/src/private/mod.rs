//! Support for the export macros (not part of the stable API): the
//! per-instance state, and what the exported functions do before and after
//! calling the plugin's trait methods.

use std::cell::RefCell;
use std::thread::LocalKey;

pub use wit_bindgen;

pub use crate::bindings::informer_host::plugin::types::{Deleted as RawDeleted, Object as RawObject};
pub use crate::controller::bindings::exports::informer_host::plugin::reconciler::Action as RawAction;

use crate::controller::Reconciler;
use crate::{Config, Object, ResourceEventHandler};

mod batch;

pub use batch::{before_visible_effect, on_batch};
pub(crate) use batch::{fetch_metadata, lend};

/// The per-instance plugin value (`None` until `init` or the first call).
pub struct State<T>(RefCell<Option<T>>);

impl<T> State<T> {
    pub const fn new() -> Self {
        State(RefCell::new(None))
    }
}

impl<T> Default for State<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// `init` of a handler plugin.
pub fn init<T: ResourceEventHandler>(state: &'static LocalKey<State<T>>, config: String) -> Result<(), String> {
    // A panic message is a visible effect: tell the host which batch item
    // panicked before the message is written and the instance traps.
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            before_visible_effect();
            default(info)
        }));
    });
    let mut handler = T::default();
    handler.init(&Config::new(config))?;
    state.with(|state| *state.0.borrow_mut() = Some(handler));
    Ok(())
}

/// Runs `f` on the instance's value, creating it with `Default` when the
/// host called something before `init`.
pub fn with<T: Default, R>(state: &'static LocalKey<State<T>>, f: impl FnOnce(&mut T) -> R) -> R {
    state.with(|state| f(state.0.borrow_mut().get_or_insert_with(T::default)))
}

/// `init` of a controller.
pub fn init_controller<T: Reconciler>(state: &'static LocalKey<State<T>>, config: String) -> Result<(), String> {
    let mut reconciler = T::default();
    reconciler.init(&Config::new(config))?;
    state.with(|state| *state.0.borrow_mut() = Some(reconciler));
    Ok(())
}

/// `reconcile` of a controller.
pub fn reconcile<T: Reconciler>(state: &'static LocalKey<State<T>>, key: String) -> Result<RawAction, String> {
    with(state, |reconciler| reconciler.reconcile(&key)).map(Into::into)
}

/// `map` of a controller.
pub fn map<T: Reconciler>(state: &'static LocalKey<State<T>>, informer: String, obj: RawObject) -> Vec<String> {
    with(state, |reconciler| reconciler.map(&informer, &Object::from(obj)))
}
