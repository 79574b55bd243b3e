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

//go:wasmimport informer-host:plugin/delivery@0.1.0 metadata
func deliveryMetadata(ret unsafe.Pointer)

// batchMeta is the metadata of every object of the batch in flight
// (`delivery.metadata`: per slot, a header of sixteen little-endian u32s,
// the record's size, the offset from the record's start and the length of
// each of key, namespace, name, uid, resource-version, api-version and
// kind, 0xffffffff for none, and the label count n; then 2n + 1 offsets
// bounding each label's key and value; then the bytes), fetched when the
// first object's metadata is read and decoded slot by slot as far as
// objects are read.
var batchMeta struct {
	fetched bool
	buf     []byte
	records []uint32 // per decoded slot, its record's offset in buf
	next    uint32
}

const noString = 0xffffffff

// metaHeader is the size of a record's header; the label table follows it.
const metaHeader = 64

func metaU32(at uint32) uint32 {
	b := batchMeta.buf
	if uint64(at)+4 > uint64(len(b)) {
		panic("informer-host guest: the host's metadata buffer is truncated")
	}
	return uint32(b[at]) | uint32(b[at+1])<<8 | uint32(b[at+2])<<16 | uint32(b[at+3])<<24
}

// metaText is the buffer's bytes start..end as a string (a view into the
// buffer, which is never written again).
func metaText(start, end uint32) string {
	if start > end || uint64(end) > uint64(len(batchMeta.buf)) {
		panic("informer-host guest: the host's metadata buffer has a malformed record")
	}
	if start == end {
		return ""
	}
	return unsafe.String(&batchMeta.buf[start], end-start)
}

// metaRecord is the offset of slot's record.
func metaRecord(slot uint32) uint32 {
	if !batchMeta.fetched {
		deliveryMetadata(retPtr())
		ptr, n := ret[0], ret[1]
		batchMeta.buf = make([]byte, n)
		if n > 0 {
			copy(batchMeta.buf, unsafe.Slice((*byte)(unsafe.Pointer(uintptr(ptr))), n))
		}
		resetArena()
		batchMeta.fetched = true
	}
	for uint32(len(batchMeta.records)) <= slot {
		at := batchMeta.next
		batchMeta.records = append(batchMeta.records, at)
		// A record starts with its size; a size below the header's is
		// never sent and would not advance.
		size := metaU32(at)
		if size < metaHeader {
			panic("informer-host guest: the host's metadata buffer has a malformed record")
		}
		batchMeta.next = at + size
	}
	return batchMeta.records[slot]
}

// metaField is field i (0 key ... 6 kind) of slot's metadata, found
// through the record's header.
func metaField(slot uint32, field int) (string, bool) {
	record := metaRecord(slot)
	start := record + metaU32(record+4+8*uint32(field))
	n := metaU32(record + 8 + 8*uint32(field))
	if n == noString {
		return "", false
	}
	return metaText(start, start+n), true
}

// metaLabels calls f with each label of slot until it returns false.
// Label i's key and value lie between bounds 2i, 2i + 1 and 2i + 2.
func metaLabels(slot uint32, f func(k, v string) bool) {
	record := metaRecord(slot)
	count := metaU32(record + 4*15)
	bound := func(j uint32) uint32 { return record + metaU32(record+metaHeader+4*j) }
	for i := uint32(0); i < count; i++ {
		k, v := bound(2*i), bound(2*i+1)
		if !f(metaText(k, v), metaText(v, bound(2*i+2))) {
			return
		}
	}
}

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
	batchMeta.fetched, batchMeta.buf, batchMeta.records, batchMeta.next = false, nil, batchMeta.records[:0], 0
	slot := uint32(0)
	next := func() *Object {
		slot++
		return &Object{slot: slot - 1, lendable: true, inBatch: true}
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
