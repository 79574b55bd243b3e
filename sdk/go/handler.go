//go:build wasip1 && !informer_controller

// The exports of interface `resource-event-handler` (world
// `batched-plugin`): one notification per call. Left out of controllers
// (tag informer_controller), whose world exports `reconciler` instead.

package guest

//go:wasmexport informer-host:plugin/resource-event-handler@0.1.0#init
func exportInit(ptr, n uint32) uint32 {
	defer releaseHeld()
	config := take(ptr, n)
	resetArena()
	return returnResult(callInit(Config(config)))
}

//go:wasmexport informer-host:plugin/resource-event-handler@0.1.0#on-add
func exportOnAdd(obj, isInInitialList uint32) uint32 {
	defer releaseHeld()
	o := &Object{handle: obj}
	defer o.drop()
	return returnResult(callOnAdd(o, isInInitialList != 0))
}

//go:wasmexport informer-host:plugin/resource-event-handler@0.1.0#on-update
func exportOnUpdate(old, new uint32) uint32 {
	defer releaseHeld()
	o, n := &Object{handle: old}, &Object{handle: new}
	defer o.drop()
	defer n.drop()
	return returnResult(callOnUpdate(o, n))
}

// exportOnDelete takes `deleted` flattened: the case, then the joined
// payloads (case 0: the object; case 1: the tombstone's key as pointer and
// length, then `last-known` as a discriminant and an object).
//
//go:wasmexport informer-host:plugin/resource-event-handler@0.1.0#on-delete
func exportOnDelete(tag, p1, p2, p3, p4 uint32) uint32 {
	defer releaseHeld()
	d := &Deleted{}
	if tag == 0 {
		d.Object = &Object{handle: p1}
	} else {
		d.Tombstone = true
		d.TombstoneKey = take(p1, p2)
		resetArena()
		if p3 != 0 {
			d.Object = &Object{handle: p4}
		}
	}
	if d.Object != nil {
		defer d.Object.drop()
	}
	return returnResult(callOnDelete(d))
}
