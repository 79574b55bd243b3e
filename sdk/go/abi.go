//go:build wasip1

// The canonical-ABI glue shared by both worlds a Go plugin can target:
// `batched-plugin` (wit/plugin.wit: handler.go, batch.go) and `controller`
// (wit/controller.wit: controller.go, kube.go, built with the tag
// informer_controller). It is written by hand against the WIT text recorded
// in abi.wit.txt and abi-controller.wit.txt: the build
// (plugins/build-other-languages.sh, `c-plugin-build check-abi`) compares
// that text with wit/ and fails on any difference, so a WIT change cannot
// silently reach these files' memory layouts.
//
// Two rules keep the Go runtime safe while the host writes into the guest:
//
//   - The host calls cabi_realloc while Go is inside an import (to place
//     the strings and lists an import returns). It must not touch the Go
//     heap, call into the runtime or grow the goroutine stack, so it is
//     //go:nosplit and bumps through a static arena; every caller copies
//     what the host wrote into Go values right away and resets the arena.
//   - The preview1 adapter allocates its state in `_initialize`, before
//     Go's runtime is up: cabi_realloc_adapter serves it from a static area
//     of its own that is never reset.

package guest

import "unsafe"

// arenaSize bounds what one import (or an export's arguments) may pass
// into the guest at once: an object's JSON, its labels. Kubernetes objects
// are at most about 1.5 MB.
const arenaSize = 8 << 20

var (
	arena     [arenaSize]byte
	arenaUsed uintptr

	adapterArena [256 << 10]byte
	adapterUsed  uintptr
)

//go:wasmexport cabi_realloc
//go:nosplit
func cabiRealloc(old, oldSize, align, newSize uint32) uint32 {
	return bump(uintptr(unsafe.Pointer(&arena)), &arenaUsed, arenaSize, old, oldSize, align, newSize)
}

//go:wasmexport cabi_realloc_adapter
//go:nosplit
func cabiReallocAdapter(old, oldSize, align, newSize uint32) uint32 {
	return bump(uintptr(unsafe.Pointer(&adapterArena)), &adapterUsed, uintptr(len(adapterArena)), old, oldSize, align, newSize)
}

//go:nosplit
func bump(base uintptr, used *uintptr, size uintptr, old, oldSize, align, newSize uint32) uint32 {
	if align == 0 {
		align = 1
	}
	start := (base + *used + uintptr(align) - 1) &^ (uintptr(align) - 1)
	end := start + uintptr(newSize)
	if end > base+size {
		// Past the arena: a trap (the notification is skipped), never a
		// write outside it. A nil write traps in wasm without the runtime.
		*(*byte)(unsafe.Pointer(uintptr(0xffffffff))) = 0
	}
	*used = end - base
	if old != 0 {
		n := oldSize
		if newSize < n {
			n = newSize
		}
		for i := uint32(0); i < n; i++ {
			*(*byte)(unsafe.Pointer(start + uintptr(i))) = *(*byte)(unsafe.Pointer(uintptr(old + i)))
		}
	}
	return uint32(start)
}

// resetArena forgets what the host wrote: call once it was copied.
func resetArena() { arenaUsed = 0 }

// take copies len bytes the host wrote at ptr into a Go string.
func take(ptr, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(unsafe.Pointer(uintptr(ptr))), n))
}

// ret is where imports that return more than one value write them.
var ret [4]uint32

func retPtr() unsafe.Pointer { return unsafe.Pointer(&ret) }

// takeStringAt copies a string the host wrote into the arena, then
// forgets the arena.
func takeStringAt(ptr, n uint32) string {
	s := take(ptr, n)
	resetArena()
	return s
}

// takeString reads a `string` from ret.
func takeString() string { return takeStringAt(ret[0], ret[1]) }

// takeOption reads an `option<string>` from ret: a byte discriminant, then
// the string at offset 4.
func takeOption() (string, bool) {
	if *(*byte)(unsafe.Pointer(&ret)) == 0 {
		resetArena()
		return "", false
	}
	return takeStringAt(ret[1], ret[2]), true
}

// takePairs reads a `list<tuple<string, string>>` from ret: 16 bytes per
// pair (key pointer, key length, value pointer, value length).
func takePairs() []Pair {
	ptr, n := ret[0], ret[1]
	pairs := make([]Pair, n)
	for i := uint32(0); i < n; i++ {
		e := (*[4]uint32)(unsafe.Pointer(uintptr(ptr + 16*i)))
		pairs[i] = Pair{Key: take(e[0], e[1]), Value: take(e[2], e[3])}
	}
	resetArena()
	return pairs
}

func strPtr(s string) (unsafe.Pointer, uint32) {
	return unsafe.Pointer(unsafe.StringData(s)), uint32(len(s))
}

// ---- imports: interface `log` ----------------------------------------------

//go:wasmimport informer-host:plugin/log@0.1.0 log
func wasmLog(level uint32, ptr unsafe.Pointer, n uint32)

// ---- imports: resource `object` of interface `types` -------------------------

//go:wasmimport informer-host:plugin/types@0.1.0 [resource-drop]object
func objectDrop(h uint32)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.key
func objectKey(h uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.namespace
func objectNamespace(h uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.name
func objectName(h uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.uid
func objectUID(h uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.resource-version
func objectResourceVersion(h uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.api-version
func objectAPIVersion(h uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.kind
func objectKind(h uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.labels
func objectLabels(h uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.label
func objectLabel(h uint32, ptr unsafe.Pointer, n uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.annotations
func objectAnnotations(h uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.json
func objectJSON(h uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/types@0.1.0 [method]object.pointer
func objectPointer(h uint32, ptr unsafe.Pointer, n uint32, ret unsafe.Pointer)

// ---- the return area of exports answering `result<_, string>` ---------------

// result is the return area of every export (`result<_, string>`): a
// byte discriminant, then the error string at offset 4. lastError keeps
// that string alive until the host has read it.
var (
	result    [3]uint32
	lastError string
)

func returnResult(err error) uint32 {
	if err == nil {
		result = [3]uint32{0, 0, 0}
		lastError = ""
	} else {
		lastError = err.Error()
		p, n := strPtr(lastError)
		result = [3]uint32{1, uint32(uintptr(p)), n}
	}
	return uint32(uintptr(unsafe.Pointer(&result)))
}
