//go:build wasip1 && !informer_controller

// The batch path (interface `batch-handler` of world `batched-plugin`):
// the host passes many notifications per call. Objects are lent lazily
// (a handler that never looks at one costs no host call), and the host is
// told `delivery.begin` before an item's first visible effect (a log line,
// a panic) and `delivery.done` after such an item or one that returned an
// error, so a trap skips exactly the item at fault.

package guest

import "unsafe"

//go:wasmimport informer-host:plugin/delivery@0.1.0 begin
func deliveryBegin(index uint32)

//go:wasmimport informer-host:plugin/delivery@0.1.0 done
func deliveryDone(index, isSome uint32, ptr unsafe.Pointer, n uint32)

//go:wasmimport informer-host:plugin/delivery@0.1.0 lend
func deliveryLend(slot uint32) uint32

// current is the batch item in flight: its index, and whether the host
// was told it is having a visible effect.
var current struct {
	active bool
	index  uint32
	begun  bool
}

// beforeVisibleEffect tells the host, once per batch item, that the item
// is about to have a visible effect. Outside a batch it does nothing.
func beforeVisibleEffect() {
	if current.active && !current.begun {
		current.begun = true
		deliveryBegin(current.index)
	}
}

// exportOnBatch takes `kinds: list<u8>` and `tombstone-keys: list<string>`
// (each a pointer and a length; a string is a pointer and a length).
//
//go:wasmexport informer-host:plugin/batch-handler@0.1.0#on-batch
func exportOnBatch(kindsPtr, kindsLen, keysPtr, keysLen uint32) {
	kinds := []byte(take(kindsPtr, kindsLen))
	keys := make([]string, keysLen)
	for i := uint32(0); i < keysLen; i++ {
		e := (*[2]uint32)(unsafe.Pointer(uintptr(keysPtr + 8*i)))
		keys[i] = take(e[0], e[1])
	}
	resetArena()
	slot := uint32(0)
	next := func() *Object {
		slot++
		return &Object{slot: slot - 1, lendable: true}
	}
	for i, kind := range kinds {
		current.active, current.index, current.begun = true, uint32(i), false
		var err error
		switch kind {
		case 0, 1:
			obj := next()
			err = batchItem(func() error { return callOnAdd(obj, kind == 1) }, obj)
		case 2:
			old, new := next(), next()
			err = batchItem(func() error { return callOnUpdate(old, new) }, old, new)
		case 3:
			d := &Deleted{Object: next()}
			err = batchItem(func() error { return callOnDelete(d) }, d.Object)
		case 4:
			d := &Deleted{Object: next(), Tombstone: true}
			if len(keys) > 0 {
				d.TombstoneKey, keys = keys[0], keys[1:]
			}
			err = batchItem(func() error { return callOnDelete(d) }, d.Object)
		default:
			err = errorString("unknown notification kind from the host")
		}
		if current.begun || err != nil {
			if err != nil {
				msg := err.Error()
				p, n := strPtr(msg)
				deliveryDone(uint32(i), 1, p, n)
			} else {
				deliveryDone(uint32(i), 0, nil, 0)
			}
		}
		current.active = false
	}
}

// batchItem runs one item's handler, gives back the objects it was lent,
// and tells the host before a panic escapes (its message is a visible
// effect, and the trap must skip this item only).
func batchItem(f func() error, objects ...*Object) (err error) {
	defer func() {
		releaseHeld()
		for _, o := range objects {
			if o != nil {
				o.drop()
			}
		}
		if r := recover(); r != nil {
			beforeVisibleEffect()
			panic(r)
		}
	}()
	return f()
}
