// The Go twin of the Rust `cache-reader` plugin: uses the `cache` import.
// On every add and update it logs how many objects the cache holds in the
// object's namespace and whether it holds the object; with config
// `{"probe": ["ns/name", ...]}` it also reads those keys and counts every
// object it can list. Same lines as the Rust one.
package main

import "informerhost.dev/guest"

type reader struct {
	guest.NoopHandler
	Probe []string `json:"probe"`
}

func (r *reader) Init(config guest.Config) error { return config.Decode(r) }

func (r *reader) report(obj *guest.Object) {
	namespace, _ := obj.Namespace()
	count := len(guest.CacheList(namespace))
	cached := guest.CacheGet(obj.Key()) != nil
	scope := namespace
	if scope == "" {
		scope = "<cluster>"
	}
	guest.Info("cache %s holds %d objects; %s cached=%t", scope, count, obj.Key(), cached)
	if len(r.Probe) > 0 {
		guest.Info("cache lists %d objects in all", len(guest.CacheList("")))
		for _, key := range r.Probe {
			guest.Info("probe %s found=%t", key, guest.CacheGet(key) != nil)
		}
	}
}

func (r *reader) OnAdd(obj *guest.Object, _ bool) error { r.report(obj); return nil }

func (r *reader) OnUpdate(_, new *guest.Object) error { r.report(new); return nil }

func init() { guest.Register(&reader{}) }

func main() {}
