//! Informer Host: Kubernetes shared informers whose handlers are sandboxed
//! WebAssembly components.
//!
//! - [`informer`]: the engine (client-go's SharedIndexInformer), no wasm.
//! - [`source`]: where objects come from (memory, manifests, kube).

pub mod informer;
pub mod plugin;
pub mod source;
