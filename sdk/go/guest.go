//go:build wasip1

// Package guest is the Go SDK of the informer host: write a handler plugin
// as an implementation of [Handler] (client-go's ResourceEventHandler
// shape), register it from an init function, and build it with
// plugins/build-other-languages.sh (GOOS=wasip1 GOARCH=wasm,
// -buildmode=c-shared, componentized with the preview1 reactor adapter).
//
//	type recorder struct{ guest.NoopHandler }
//
//	func (recorder) OnAdd(obj *guest.Object, isInInitialList bool) error {
//		guest.Info(guest.DescribeAdd(obj, isInInitialList))
//		return nil
//	}
//
//	func init() { guest.Register(recorder{}) }
//	func main() {}
//
// A returned error is logged and counted by the host; a panic traps the
// instance, which skips exactly that notification (as a Rust panic).
package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Handler receives an informer's notifications, in order, one call each.
type Handler interface {
	// Init is called once per instance with the plugin's configuration.
	// An error refuses the load (or the fresh instance).
	Init(config Config) error
	// OnAdd: an object was added; isInInitialList when it came with the
	// informer's initial list (or a replay).
	OnAdd(obj *Object, isInInitialList bool) error
	// OnUpdate: an object changed (or a resync redelivered it).
	OnUpdate(old, new *Object) error
	// OnDelete: an object was deleted, or found missing on relist (a
	// tombstone, client-go's DeletedFinalStateUnknown).
	OnDelete(obj *Deleted) error
}

// NoopHandler implements every method of [Handler] by doing nothing;
// embed it and define only the methods you need.
type NoopHandler struct{}

func (NoopHandler) Init(Config) error               { return nil }
func (NoopHandler) OnAdd(*Object, bool) error       { return nil }
func (NoopHandler) OnUpdate(old, new *Object) error { return nil }
func (NoopHandler) OnDelete(*Deleted) error         { return nil }

var handler Handler

// Register makes h the plugin's handler. Call it from an init function.
func Register(h Handler) { handler = h }

var errNoHandler = errors.New("the Go plugin registered no handler (call guest.Register from an init function)")

func callInit(c Config) error {
	if handler == nil {
		return errNoHandler
	}
	return handler.Init(c)
}

func callOnAdd(o *Object, initial bool) error {
	if handler == nil {
		return errNoHandler
	}
	return handler.OnAdd(o, initial)
}

func callOnUpdate(old, new *Object) error {
	if handler == nil {
		return errNoHandler
	}
	return handler.OnUpdate(old, new)
}

func callOnDelete(d *Deleted) error {
	if handler == nil {
		return errNoHandler
	}
	return handler.OnDelete(d)
}

// Config is the plugin's configuration as JSON text (`{}` when none).
type Config string

// Decode unmarshals the configuration into v with encoding/json; unknown
// fields are an error, so a misspelt option refuses the load.
func (c Config) Decode(v any) error {
	text := string(c)
	if text == "" {
		text = "{}"
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// Worded as the Rust SDK's (serde's) message.
		if field, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
			return fmt.Errorf("invalid plugin configuration: unknown field `%s`", strings.TrimSuffix(field, `"`))
		}
		return fmt.Errorf("invalid plugin configuration: %w", err)
	}
	return nil
}

// Pair is one label or annotation.
type Pair struct{ Key, Value string }

// Object is one immutable version of a Kubernetes object, owned by the
// host. It is valid during the call that received it only: the SDK gives
// it back to the host when the handler returns (decode what you keep).
// Metadata accessors copy only what they return, never the body; in a
// batch they read the batch's one metadata buffer and copy nothing.
type Object struct {
	handle  uint32
	dropped bool
	// In a batch: the object's slot, lent by the host on first use; its
	// metadata is read from the batch's buffer.
	slot     uint32
	lendable bool
	inBatch  bool
}

// meta is field i of a batch object's metadata (see batchMeta).
func (o *Object) meta(field int) (string, bool) {
	if o.dropped {
		panic("informer-host guest: an Object was used after the call that received it returned")
	}
	return metaField(o.slot, field)
}

func (o *Object) live() uint32 {
	if o.dropped {
		panic("informer-host guest: an Object was used after the call that received it returned")
	}
	if o.lendable {
		o.lendable = false
		o.handle = deliveryLend(o.slot)
	}
	return o.handle
}

func (o *Object) drop() {
	if !o.dropped {
		o.dropped = true
		if o.handle != 0 {
			objectDrop(o.handle)
		}
	}
}

// Key is `namespace/name`, or `name` for a cluster-scoped object.
func (o *Object) Key() string {
	if o.inBatch {
		s, _ := o.meta(0)
		return s
	}
	objectKey(o.live(), retPtr())
	return takeString()
}

// Namespace, and false for a cluster-scoped object.
func (o *Object) Namespace() (string, bool) {
	if o.inBatch {
		return o.meta(1)
	}
	objectNamespace(o.live(), retPtr())
	return takeOption()
}

func (o *Object) Name() string {
	if o.inBatch {
		s, _ := o.meta(2)
		return s
	}
	objectName(o.live(), retPtr())
	return takeString()
}

func (o *Object) UID() (string, bool) {
	if o.inBatch {
		return o.meta(3)
	}
	objectUID(o.live(), retPtr())
	return takeOption()
}

func (o *Object) ResourceVersion() (string, bool) {
	if o.inBatch {
		return o.meta(4)
	}
	objectResourceVersion(o.live(), retPtr())
	return takeOption()
}

func (o *Object) APIVersion() string {
	if o.inBatch {
		s, _ := o.meta(5)
		return s
	}
	objectAPIVersion(o.live(), retPtr())
	return takeString()
}

func (o *Object) Kind() string {
	if o.inBatch {
		s, _ := o.meta(6)
		return s
	}
	objectKind(o.live(), retPtr())
	return takeString()
}

// Labels, in the object's order.
func (o *Object) Labels() []Pair {
	if o.inBatch {
		o.meta(0)
		pairs := []Pair{}
		metaLabels(o.slot, func(k, v string) bool {
			pairs = append(pairs, Pair{Key: k, Value: v})
			return true
		})
		return pairs
	}
	objectLabels(o.live(), retPtr())
	return takePairs()
}

// Label is the value of one label, without copying the others.
func (o *Object) Label(key string) (string, bool) {
	if o.inBatch {
		o.meta(0)
		var value string
		var found bool
		metaLabels(o.slot, func(k, v string) bool {
			if k == key {
				value, found = v, true
				return false
			}
			return true
		})
		return value, found
	}
	p, n := strPtr(key)
	objectLabel(o.live(), p, n, retPtr())
	return takeOption()
}

// Annotations, in the object's order.
func (o *Object) Annotations() []Pair { objectAnnotations(o.live(), retPtr()); return takePairs() }

// JSON is the whole object as JSON text.
func (o *Object) JSON() string { objectJSON(o.live(), retPtr()); return takeString() }

// Pointer is the JSON text of the value at an RFC 6901 pointer such as
// `/spec/replicas`, and false when nothing is there.
func (o *Object) Pointer(pointer string) (string, bool) {
	p, n := strPtr(pointer)
	objectPointer(o.live(), p, n, retPtr())
	return takeOption()
}

// Decode unmarshals the whole object into v (your own struct, or a
// map[string]any) with encoding/json.
func (o *Object) Decode(v any) error { return json.Unmarshal([]byte(o.JSON()), v) }

// DecodePointer unmarshals the value at an RFC 6901 pointer into v;
// false when nothing is there (v is then untouched).
func (o *Object) DecodePointer(pointer string, v any) (bool, error) {
	text, ok := o.Pointer(pointer)
	if !ok {
		return false, nil
	}
	return true, json.Unmarshal([]byte(text), v)
}

// Deleted is what OnDelete receives.
type Deleted struct {
	// Object is the last known state: always set for a plain delete; for
	// a tombstone, the last state the host had cached, or nil.
	Object *Object
	// Tombstone: deleted while the watch was disconnected, found missing
	// on relist (client-go's DeletedFinalStateUnknown).
	Tombstone    bool
	TombstoneKey string
}

// Key of the deleted object.
func (d *Deleted) Key() string {
	if d.Tombstone {
		return d.TombstoneKey
	}
	return d.Object.Key()
}

// Name of the deleted object (from its key for a tombstone without state).
func (d *Deleted) Name() string {
	if d.Object != nil {
		return d.Object.Name()
	}
	key := d.TombstoneKey
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '/' {
			return key[i+1:]
		}
	}
	return key
}

// Level of a log line.
type Level uint32

const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// Log writes one line into the host's logs (needs the `log` grant; without
// it the host drops the line).
func Log(level Level, message string) {
	beforeVisibleEffect()
	p, n := strPtr(message)
	wasmLog(uint32(level), p, n)
}

func Trace(format string, args ...any) { Log(LevelTrace, sprintf(format, args)) }
func Debug(format string, args ...any) { Log(LevelDebug, sprintf(format, args)) }
func Info(format string, args ...any)  { Log(LevelInfo, sprintf(format, args)) }
func Warn(format string, args ...any)  { Log(LevelWarn, sprintf(format, args)) }
func Error(format string, args ...any) { Log(LevelError, sprintf(format, args)) }

func sprintf(format string, args []any) string {
	if len(args) == 0 {
		return format
	}
	return fmt.Sprintf(format, args...)
}

// DescribeAdd, DescribeUpdate and DescribeDelete format a notification as
// every SDK's `describe` does (the recorders' lines).
func DescribeAdd(obj *Object, isInInitialList bool) string {
	return fmt.Sprintf("add %s rv=%s initial=%t", obj.Key(), rv(obj), isInInitialList)
}

func DescribeUpdate(old, new *Object) string {
	return fmt.Sprintf("update %s rv=%s->%s", new.Key(), rv(old), rv(new))
}

func DescribeDelete(d *Deleted) string {
	what := "delete"
	if d.Tombstone {
		what = "delete-tombstone"
	}
	return fmt.Sprintf("%s %s rv=%s", what, d.Key(), rv(d.Object))
}

func rv(o *Object) string {
	if o == nil {
		return "none"
	}
	if v, ok := o.ResourceVersion(); ok {
		return v
	}
	return "none"
}

type errorString string

func (e errorString) Error() string { return string(e) }
