// Reads key, name, namespace, resource version and labels of every object
// and discards them: the benchmark for metadata-only handlers (the twin of
// the Rust `metadata` plugin).
package main

import "informerhost.dev/guest"

type metadata struct{ guest.NoopHandler }

var sink int

func read(obj *guest.Object) {
	sink += len(obj.Key()) + len(obj.Name())
	ns, _ := obj.Namespace()
	rv, _ := obj.ResourceVersion()
	sink += len(ns) + len(rv) + len(obj.Labels())
}

func (metadata) OnAdd(obj *guest.Object, _ bool) error { read(obj); return nil }

func (metadata) OnUpdate(_, new *guest.Object) error { read(new); return nil }

func (metadata) OnDelete(obj *guest.Deleted) error {
	sink += len(obj.Key())
	if obj.Object != nil {
		read(obj.Object)
	}
	return nil
}

func init() { guest.Register(metadata{}) }

func main() {}
