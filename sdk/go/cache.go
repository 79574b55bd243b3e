//go:build wasip1

// Interface `cache` (both worlds): reads of the plugin's own informer's
// cache, with the `cache` grant. Objects read here are the host's, like
// the ones a call receives: the SDK gives them back when the call returns.

package guest

import "unsafe"

//go:wasmimport informer-host:plugin/cache@0.1.0 get
func cacheGet(ptr unsafe.Pointer, n uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/cache@0.1.0 list
func cacheList(isSome uint32, ptr unsafe.Pointer, n uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/cache@0.1.0 by-index
func cacheByIndex(iptr unsafe.Pointer, in uint32, vptr unsafe.Pointer, vn uint32, ret unsafe.Pointer)

// held are the objects read from a cache or a store during the current
// call; the SDK drops them when the call (or the batch item) returns.
var held []*Object

func hold(handle uint32) *Object {
	o := &Object{handle: handle}
	held = append(held, o)
	return o
}

// releaseHeld gives back every object read during the call.
func releaseHeld() {
	for _, o := range held {
		o.drop()
	}
	clear(held)
	held = held[:0]
}

// takeHandles reads a `list<own<object>>` (a pointer and a length) the
// host wrote into the arena.
func takeHandles(ptr, n uint32) []*Object {
	objects := make([]*Object, n)
	for i := uint32(0); i < n; i++ {
		objects[i] = hold(*(*uint32)(unsafe.Pointer(uintptr(ptr + 4*i))))
	}
	resetArena()
	return objects
}

// optionalString passes an `option<string>`: a discriminant, a pointer and
// a length ("" is none).
func optionalString(s string) (uint32, unsafe.Pointer, uint32) {
	if s == "" {
		return 0, nil, 0
	}
	p, n := strPtr(s)
	return 1, p, n
}

// CacheGet is the object with key `namespace/name` (or `name`) in the
// plugin's informer's cache, or nil. Valid until the call returns.
func CacheGet(key string) *Object {
	p, n := strPtr(key)
	cacheGet(p, n, retPtr())
	if *(*byte)(unsafe.Pointer(&ret)) == 0 {
		return nil
	}
	return hold(ret[1])
}

// CacheList is every cached object, or those in `namespace` when it is
// not "". Valid until the call returns.
func CacheList(namespace string) []*Object {
	some, p, n := optionalString(namespace)
	cacheList(some, p, n, retPtr())
	return takeHandles(ret[0], ret[1])
}

// CacheByIndex is the cached objects whose index `index` (e.g.
// "namespace") has `value`; an error for an index the informer lacks.
func CacheByIndex(index, value string) ([]*Object, error) {
	ip, in := strPtr(index)
	vp, vn := strPtr(value)
	cacheByIndex(ip, in, vp, vn, retPtr())
	if *(*byte)(unsafe.Pointer(&ret)) != 0 {
		return nil, errorString(takeStringAt(ret[1], ret[2]))
	}
	return takeHandles(ret[1], ret[2]), nil
}
