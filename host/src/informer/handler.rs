//! What the engine delivers and the trait a handler implements.
//!
//! This module owns the notification type (client-go's `addNotification`,
//! `updateNotification`, `deleteNotification`) and the handler contract,
//! including how a handler reports a crash. It may not know how a handler
//! is implemented (native or wasm).

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::object::{DeletedObject, ObjectRef};

/// One notification for one handler.
#[derive(Debug, Clone)]
pub enum Notification {
    Add { obj: ObjectRef, is_in_initial_list: bool },
    Update { old: ObjectRef, new: ObjectRef },
    Delete(DeletedObject),
}

impl Notification {
    /// The key of the object the notification is about.
    pub fn key(&self) -> &str {
        match self {
            Notification::Add { obj, .. } => obj.key(),
            Notification::Update { new, .. } => new.key(),
            Notification::Delete(d) => d.key(),
        }
    }
    /// `add`, `update` or `delete`, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Notification::Add { .. } => "add",
            Notification::Update { .. } => "update",
            Notification::Delete(_) => "delete",
        }
    }
    /// True for adds that belong to the initial list (they gate `has_synced`).
    pub fn is_initial(&self) -> bool {
        matches!(self, Notification::Add { is_in_initial_list: true, .. })
    }
}

/// How a handler call went wrong.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum HandlerError {
    /// The handler returned an error: logged and counted; delivery goes on.
    #[error("handler returned an error: {0}")]
    Failed(String),
    /// The handler crashed (panic, trap, fuel, deadline, memory): the
    /// notification is skipped and delivery resumes after one second.
    #[error("handler crashed: {0}")]
    Crashed(String),
}

/// Where a handler's calls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// On the listener's own task: for handlers that return quickly.
    Inline,
    /// On the bounded blocking pool: for calls that may run long (wasm).
    Blocking,
}

/// client-go's `ResourceEventHandler`. Calls for one handler are sequential.
///
/// ```
/// use informer_host::informer::{ResourceEventHandler, HandlerError, ObjectRef, DeletedObject};
/// struct Count(usize);
/// impl ResourceEventHandler for Count {
///     fn on_add(&mut self, _: &ObjectRef, _: bool) -> Result<(), HandlerError> { self.0 += 1; Ok(()) }
///     fn on_update(&mut self, _: &ObjectRef, _: &ObjectRef) -> Result<(), HandlerError> { Ok(()) }
///     fn on_delete(&mut self, _: &DeletedObject) -> Result<(), HandlerError> { Ok(()) }
/// }
/// ```
pub trait ResourceEventHandler: Send + 'static {
    fn on_add(&mut self, obj: &ObjectRef, is_in_initial_list: bool) -> Result<(), HandlerError>;
    fn on_update(&mut self, old: &ObjectRef, new: &ObjectRef) -> Result<(), HandlerError>;
    fn on_delete(&mut self, obj: &DeletedObject) -> Result<(), HandlerError>;

    /// Where calls run; native handlers stay [`Delivery::Inline`].
    fn delivery(&self) -> Delivery {
        Delivery::Inline
    }

    /// Delivers notifications in order and reports how far it got. It
    /// stops right after a [`HandlerError::Crashed`]: the notifications
    /// after that one were not delivered and come again.
    /// [`Delivery::Blocking`] handlers receive their notifications this way,
    /// so that one call into a sandbox can carry many; the default delivers
    /// them one at a time.
    fn deliver_many(&mut self, batch: &[&Notification]) -> Delivered {
        deliver_each(self, batch)
    }

    /// Delivers one notification. A native panic is caught and reported as
    /// [`HandlerError::Crashed`], like client-go's `HandleCrash`.
    fn deliver(&mut self, n: &Notification) -> Result<(), HandlerError> {
        let r = catch_unwind(AssertUnwindSafe(|| match n {
            Notification::Add { obj, is_in_initial_list } => self.on_add(obj, *is_in_initial_list),
            Notification::Update { old, new } => self.on_update(old, new),
            Notification::Delete(d) => self.on_delete(d),
        }));
        match r {
            Ok(r) => r,
            Err(payload) => Err(HandlerError::Crashed(panic_message(&payload))),
        }
    }
}

/// What a [`ResourceEventHandler::deliver_many`] call did.
#[derive(Debug, Default, PartialEq)]
pub struct Delivered {
    /// Notifications handled (or skipped after a crash), from the first.
    pub handled: usize,
    /// The handled ones that failed, by position; a crash can only be last.
    pub errors: Vec<(usize, HandlerError)>,
    /// The handler crashed with no notification to blame (a batch that
    /// trapped before any item began): none is skipped, but the listener
    /// waits [`super::listener::CRASH_BACKOFF`] as after any crash, so
    /// crashing this way costs what crashing on an item costs.
    pub crashed_between: Option<String>,
}

impl Delivered {
    /// True when every notification of a batch of `len` was handled
    /// without an error.
    pub fn all_ok(&self, len: usize) -> bool {
        self.handled == len && self.errors.is_empty()
    }
}

/// [`ResourceEventHandler::deliver_many`] one notification at a time (for
/// handlers that override it and sometimes fall back).
pub fn deliver_each<H: ResourceEventHandler + ?Sized>(handler: &mut H, batch: &[&Notification]) -> Delivered {
    let mut d = Delivered::default();
    for n in batch {
        let r = handler.deliver(n);
        d.handled += 1;
        if let Err(e) = r {
            let crashed = matches!(e, HandlerError::Crashed(_));
            d.errors.push((d.handled - 1, e));
            if crashed {
                break;
            }
        }
    }
    d
}

fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("panic: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("panic: {s}")
    } else {
        "panic".to_string()
    }
}

/// A handler built from closures (client-go's `ResourceEventHandlerFuncs`).
/// Missing closures do nothing.
#[derive(Default)]
pub struct HandlerFuncs {
    #[allow(clippy::type_complexity)]
    pub add: Option<Box<dyn FnMut(&ObjectRef, bool) -> Result<(), HandlerError> + Send>>,
    #[allow(clippy::type_complexity)]
    pub update: Option<Box<dyn FnMut(&ObjectRef, &ObjectRef) -> Result<(), HandlerError> + Send>>,
    #[allow(clippy::type_complexity)]
    pub delete: Option<Box<dyn FnMut(&DeletedObject) -> Result<(), HandlerError> + Send>>,
}

impl ResourceEventHandler for HandlerFuncs {
    fn on_add(&mut self, obj: &ObjectRef, initial: bool) -> Result<(), HandlerError> {
        self.add.as_mut().map_or(Ok(()), |f| f(obj, initial))
    }
    fn on_update(&mut self, old: &ObjectRef, new: &ObjectRef) -> Result<(), HandlerError> {
        self.update.as_mut().map_or(Ok(()), |f| f(old, new))
    }
    fn on_delete(&mut self, obj: &DeletedObject) -> Result<(), HandlerError> {
        self.delete.as_mut().map_or(Ok(()), |f| f(obj))
    }
}

/// Calls `f` with every notification (handy for tests and benchmarks).
pub struct FnHandler<F>(pub F);

impl<F> ResourceEventHandler for FnHandler<F>
where
    F: FnMut(&Notification) -> Result<(), HandlerError> + Send + 'static,
{
    fn on_add(&mut self, obj: &ObjectRef, is_in_initial_list: bool) -> Result<(), HandlerError> {
        (self.0)(&Notification::Add { obj: obj.clone(), is_in_initial_list })
    }
    fn on_update(&mut self, old: &ObjectRef, new: &ObjectRef) -> Result<(), HandlerError> {
        (self.0)(&Notification::Update { old: old.clone(), new: new.clone() })
    }
    fn on_delete(&mut self, obj: &DeletedObject) -> Result<(), HandlerError> {
        (self.0)(&Notification::Delete(obj.clone()))
    }
    fn deliver(&mut self, n: &Notification) -> Result<(), HandlerError> {
        match catch_unwind(AssertUnwindSafe(|| (self.0)(n))) {
            Ok(r) => r,
            Err(p) => Err(HandlerError::Crashed(panic_message(&p))),
        }
    }
}
