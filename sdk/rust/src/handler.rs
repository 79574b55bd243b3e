//! Handler plugins: the [`ResourceEventHandler`] trait and the
//! [`export_plugin!`](crate::export_plugin) macro that exports it as the
//! `batched-plugin` world.

use crate::{Config, Deleted, Object};

/// A handler of informer notifications, implemented by the plugin's own type.
///
/// Every method has a no-op default. The value is created with [`Default`]
/// when the host calls `init`, then [`init`](Self::init) configures it.
/// Notifications arrive one at a time, in order, as client-go's
/// `ResourceEventHandler` would receive them.
pub trait ResourceEventHandler: Default + 'static {
    /// Called once per instance with the plugin's configuration.
    fn init(&mut self, config: &Config) -> Result<(), String> {
        let _ = config;
        Ok(())
    }

    /// An object was added; `is_in_initial_list` is true for adds from the
    /// initial list (or the synthetic adds a late-joining handler receives).
    fn on_add(&mut self, obj: &Object, is_in_initial_list: bool) -> Result<(), String> {
        let _ = (obj, is_in_initial_list);
        Ok(())
    }

    /// An object changed (or was resynced: then `old` and `new` carry the same
    /// resource version).
    fn on_update(&mut self, old: &Object, new: &Object) -> Result<(), String> {
        let _ = (old, new);
        Ok(())
    }

    /// An object was deleted: its last known state, or a tombstone.
    fn on_delete(&mut self, obj: &Deleted) -> Result<(), String> {
        let _ = obj;
        Ok(())
    }
}

/// Exports a [`ResourceEventHandler`] type as the plugin's
/// `resource-event-handler`. Use it once, at the crate root of a `cdylib`.
///
/// ```no_run
/// #[derive(Default)]
/// struct MyPlugin;
/// impl informer_guest::ResourceEventHandler for MyPlugin {}
/// informer_guest::export_plugin!(MyPlugin);
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($ty:ty) => {
        const _: () = {
            ::std::thread_local! {
                static __INFORMER_GUEST_STATE: $crate::__private::State<$ty> = const { $crate::__private::State::new() };
            }

            struct __InformerGuestExport;

            impl $crate::bindings::exports::informer_host::plugin::resource_event_handler::Guest
                for __InformerGuestExport
            {
                fn init(config: ::std::string::String) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::init(&__INFORMER_GUEST_STATE, config)
                }

                fn on_add(
                    obj: $crate::__private::RawObject,
                    is_in_initial_list: bool,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::with(&__INFORMER_GUEST_STATE, |handler| {
                        $crate::ResourceEventHandler::on_add(handler, &obj.into(), is_in_initial_list)
                    })
                }

                fn on_update(
                    old: $crate::__private::RawObject,
                    new: $crate::__private::RawObject,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::with(&__INFORMER_GUEST_STATE, |handler| {
                        $crate::ResourceEventHandler::on_update(handler, &old.into(), &new.into())
                    })
                }

                fn on_delete(
                    obj: $crate::__private::RawDeleted,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::__private::with(&__INFORMER_GUEST_STATE, |handler| {
                        $crate::ResourceEventHandler::on_delete(handler, &obj.into())
                    })
                }
            }

            impl $crate::bindings::exports::informer_host::plugin::batch_handler::Guest for __InformerGuestExport {
                fn on_batch(
                    kinds: ::std::vec::Vec<u8>,
                    tombstone_keys: ::std::vec::Vec<::std::string::String>,
                ) {
                    $crate::__private::on_batch(&__INFORMER_GUEST_STATE, kinds, tombstone_keys)
                }
            }

            $crate::bindings::__export_plugin_bindings!(__InformerGuestExport with_types_in $crate::bindings);
        };
    };
}
