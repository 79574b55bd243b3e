//go:build wasip1 && informer_controller

// World `controller` (wit/controller.wit): a plugin whose folder has a
// `world` file saying `controller` is built with the tag
// informer_controller, which swaps the handler exports for the
// `reconciler` ones below. Writes to the cluster are in kube.go.
//
//	type labeller struct{}
//
//	func (labeller) Init(guest.Config) error { return nil }
//
//	func (labeller) Reconcile(key string) (guest.Action, error) {
//		ns, err := guest.StoreGet("namespaces", key)
//		if err != nil || ns == nil {
//			return guest.Done, err // deleted: nothing to do
//		}
//		if _, ok := ns.Label("team"); !ok {
//			patch := guest.MergePatch(`{"metadata":{"labels":{"team":"none"}}}`)
//			if _, err := guest.Patch(guest.TargetOf(ns), patch); err != nil {
//				return guest.Done, err // requeued with backoff
//			}
//		}
//		return guest.Done, nil
//	}
//
//	func init() { guest.RegisterReconciler(labeller{}) }
//	func main() {}

package guest

import (
	"errors"
	"time"
	"unsafe"
)

// Reconciler brings one object of the controller's primary resource to its
// desired state. Reconciles are level-driven: read the stores, compare
// with what should be, write only the difference, so a reconcile when
// nothing changed writes nothing.
type Reconciler interface {
	// Init is called once per instance with the plugin's configuration.
	// The host may run several instances and replaces one that trapped:
	// state kept between calls is a per-instance cache, never the truth.
	Init(config Config) error
	// Reconcile is called with the key (`namespace/name`, or `name`) of an
	// object that changed or was asked for; it may no longer exist. An
	// error, or a panic, requeues the key with exponential backoff.
	Reconcile(key string) (Action, error)
}

// Mapper is implemented by a Reconciler that maps the objects of secondary
// informers to primary keys itself (the host calls it only for informers
// its configuration maps by plugin); others map through owner references
// or labels, in the host.
type Mapper interface {
	Map(informer string, obj *Object) []string
}

// Action is what to do after a successful reconcile.
type Action struct {
	requeue bool
	after   time.Duration
}

// Done: nothing until the next change (the key's failures are forgotten).
var Done = Action{}

// RequeueAfter reconciles the key again after d (rounded up to a
// millisecond).
func RequeueAfter(d time.Duration) Action { return Action{requeue: true, after: d} }

// Requeue reports whether the action asks for another reconcile, and when.
func (a Action) Requeue() (time.Duration, bool) { return a.after, a.requeue }

var reconciler Reconciler

// RegisterReconciler makes r the plugin's reconciler. Call it from an init
// function.
func RegisterReconciler(r Reconciler) { reconciler = r }

var errNoReconciler = errors.New("the Go controller registered no reconciler (call guest.RegisterReconciler from an init function)")

// ---- exports: interface `reconciler` ---------------------------------------

//go:wasmexport informer-host:plugin/reconciler@0.1.0#init
func exportReconcilerInit(ptr, n uint32) uint32 {
	defer releaseHeld()
	config := take(ptr, n)
	resetArena()
	if reconciler == nil {
		return returnResult(errNoReconciler)
	}
	return returnResult(reconciler.Init(Config(config)))
}

// reconcileResult is the return area of `reconcile` (`result<action,
// string>`, alignment 8): the result's discriminant at byte 0, its payload
// at byte 8 (the action's discriminant at 8 and its u64 at 16, or the
// error string's pointer and length at 8 and 12).
var (
	reconcileResult [3]uint64
	reconcileError  string
)

//go:wasmexport informer-host:plugin/reconciler@0.1.0#reconcile
func exportReconcile(ptr, n uint32) uint32 {
	defer releaseHeld()
	key := take(ptr, n)
	resetArena()
	var action Action
	err := errNoReconciler
	if reconciler != nil {
		action, err = reconciler.Reconcile(key)
	}
	reconcileResult = [3]uint64{}
	reconcileError = ""
	area := unsafe.Pointer(&reconcileResult)
	if err != nil {
		reconcileError = err.Error()
		p, l := strPtr(reconcileError)
		*(*byte)(area) = 1
		*(*uint32)(unsafe.Add(area, 8)) = uint32(uintptr(p))
		*(*uint32)(unsafe.Add(area, 12)) = l
	} else if action.requeue {
		*(*byte)(unsafe.Add(area, 8)) = 1
		*(*uint64)(unsafe.Add(area, 16)) = millis(action.after)
	}
	return uint32(uintptr(area))
}

// millis is d in whole milliseconds, rounded up (a sub-millisecond delay
// is not "now"), at least 0.
func millis(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d + time.Millisecond - 1) / time.Millisecond)
}

// mapResult is the return area of `map` (`list<string>`: a pointer and a
// length); mapKeys and mapEntries keep the strings alive until the host
// read them.
var (
	mapResult  [2]uint32
	mapKeys    []string
	mapEntries []uint32
)

//go:wasmexport informer-host:plugin/reconciler@0.1.0#map
func exportMap(ptr, n, handle uint32) uint32 {
	defer releaseHeld()
	informer := take(ptr, n)
	resetArena()
	obj := &Object{handle: handle}
	defer obj.drop()
	mapKeys = nil
	if m, ok := reconciler.(Mapper); ok {
		mapKeys = m.Map(informer, obj)
	}
	mapEntries = make([]uint32, 2*len(mapKeys)+1)
	for i, k := range mapKeys {
		p, l := strPtr(k)
		mapEntries[2*i], mapEntries[2*i+1] = uint32(uintptr(p)), l
	}
	mapResult = [2]uint32{uint32(uintptr(unsafe.Pointer(&mapEntries[0]))), uint32(len(mapKeys))}
	return uint32(uintptr(unsafe.Pointer(&mapResult)))
}

// ---- imports: interface `stores` -------------------------------------------

//go:wasmimport informer-host:plugin/stores@0.1.0 get
func storesGet(ip unsafe.Pointer, in uint32, kp unsafe.Pointer, kn uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/stores@0.1.0 list
func storesList(ip unsafe.Pointer, in uint32, some uint32, np unsafe.Pointer, nn uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/stores@0.1.0 by-index
func storesByIndex(ip unsafe.Pointer, in uint32, xp unsafe.Pointer, xn uint32, vp unsafe.Pointer, vn uint32, ret unsafe.Pointer)

// StoreGet is the object with `key` in the cache of the informer the
// host's configuration names `informer`, or nil when it has none; an error
// for an informer the controller does not watch. Valid until the call
// returns (decode what you keep).
func StoreGet(informer, key string) (*Object, error) {
	ip, in := strPtr(informer)
	kp, kn := strPtr(key)
	storesGet(ip, in, kp, kn, retPtr())
	// result<option<object>, string>: the payload at byte 4.
	if *(*byte)(unsafe.Pointer(&ret)) != 0 {
		return nil, errorString(takeStringAt(ret[1], ret[2]))
	}
	if *(*byte)(unsafe.Pointer(&ret[1])) == 0 {
		return nil, nil
	}
	return hold(ret[2]), nil
}

// StoreList is every object in informer `informer`'s cache, or those in
// `namespace` when it is not "".
func StoreList(informer, namespace string) ([]*Object, error) {
	ip, in := strPtr(informer)
	some, np, nn := optionalString(namespace)
	storesList(ip, in, some, np, nn, retPtr())
	if *(*byte)(unsafe.Pointer(&ret)) != 0 {
		return nil, errorString(takeStringAt(ret[1], ret[2]))
	}
	return takeHandles(ret[1], ret[2]), nil
}

// StoreByIndex is the objects of informer `informer` whose index `index`
// has `value`.
func StoreByIndex(informer, index, value string) ([]*Object, error) {
	ip, in := strPtr(informer)
	xp, xn := strPtr(index)
	vp, vn := strPtr(value)
	storesByIndex(ip, in, xp, xn, vp, vn, retPtr())
	if *(*byte)(unsafe.Pointer(&ret)) != 0 {
		return nil, errorString(takeStringAt(ret[1], ret[2]))
	}
	return takeHandles(ret[1], ret[2]), nil
}

// ---- imports: interface `queue` --------------------------------------------

//go:wasmimport informer-host:plugin/queue@0.1.0 enqueue
func queueEnqueue(p unsafe.Pointer, n uint32, afterMs uint64)

// Enqueue asks for a reconcile of the primary resource's `key` after
// `after` (0: as soon as a worker is free).
func Enqueue(key string, after time.Duration) {
	p, n := strPtr(key)
	queueEnqueue(p, n, millis(after))
}
