//go:build wasip1 && informer_controller

// Interface `kube` (world `controller`, with the `kube` grant): writes to
// the cluster. The host checks each write against the plugin's rules, its
// tenant's namespaces and its QPS before a request leaves, sends it with
// the plugin's name as field manager, and answers a refusal or an API error
// as a *KubeError, never as a trap.

package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

//go:wasmimport informer-host:plugin/kube@0.1.0 create
func kubeCreate(p unsafe.Pointer, n uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/kube@0.1.0 replace
func kubeReplace(p unsafe.Pointer, n uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/kube@0.1.0 replace-status
func kubeReplaceStatus(p unsafe.Pointer, n uint32, ret unsafe.Pointer)

// patch and patch-status take the target (9 flat values), then the patch
// body: its case and three joined payload slots (pointer, length, force).
//
//go:wasmimport informer-host:plugin/kube@0.1.0 patch
func kubePatch(ap unsafe.Pointer, an uint32, kp unsafe.Pointer, kn uint32, nsSome uint32, np unsafe.Pointer, nn uint32, mp unsafe.Pointer, mn uint32,
	tag uint32, bp unsafe.Pointer, bn uint32, force uint32, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/kube@0.1.0 patch-status
func kubePatchStatus(ap unsafe.Pointer, an uint32, kp unsafe.Pointer, kn uint32, nsSome uint32, np unsafe.Pointer, nn uint32, mp unsafe.Pointer, mn uint32,
	tag uint32, bp unsafe.Pointer, bn uint32, force uint32, ret unsafe.Pointer)

// delete's parameters flatten to 17 values, over the canonical ABI's 16:
// they are passed in memory (deleteParams), as one tuple.
//
//go:wasmimport informer-host:plugin/kube@0.1.0 delete
func kubeDelete(params unsafe.Pointer, ret unsafe.Pointer)

//go:wasmimport informer-host:plugin/kube@0.1.0 record-event
func kubeRecordEvent(ap unsafe.Pointer, an uint32, kp unsafe.Pointer, kn uint32, nsSome uint32, np unsafe.Pointer, nn uint32, mp unsafe.Pointer, mn uint32,
	eventType uint32, rp unsafe.Pointer, rn uint32, msgp unsafe.Pointer, msgn uint32, ret unsafe.Pointer)

// kubeRet is the return area of every write (alignment 8, 40 bytes):
// `result<T, kube-error>` has its discriminant at byte 0 and its payload
// at byte 8; a `kube-error` has its case at byte 8 and its payload at 16.
var kubeRet [6]uint64

func kubeRetPtr() unsafe.Pointer { return unsafe.Pointer(&kubeRet) }

func at8(off uintptr) byte    { return *(*byte)(unsafe.Add(kubeRetPtr(), off)) }
func at32(off uintptr) uint32 { return *(*uint32)(unsafe.Add(kubeRetPtr(), off)) }
func at64(off uintptr) uint64 { return *(*uint64)(unsafe.Add(kubeRetPtr(), off)) }

// kubeString is a successful write's `string` payload (the object as
// stored), or its error.
func kubeString() (string, error) {
	if at8(0) != 0 {
		return "", takeKubeError()
	}
	return takeStringAt(at32(8), at32(12)), nil
}

// Reason says why a write did not happen: the `Status` reasons of the API
// conventions, as the host's `kube-error` cases.
type Reason int

const (
	NotFound Reason = iota
	AlreadyExists
	// Conflict: a stale resourceVersion, a failed precondition or an apply
	// conflict: read again from the cache and retry.
	Conflict
	// Forbidden by the host's checks (no request was sent) or by the API
	// server.
	Forbidden
	Invalid
	RateLimited
	Timeout
	BadRequest
	ServerError
)

var reasonNames = [...]string{"not-found", "already-exists", "conflict", "forbidden", "invalid", "rate-limited", "timeout", "bad-request", "server-error"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason-%d", int(r))
}

// Cause is one field at fault in an Invalid error (`details.causes`).
type Cause struct{ Reason, Message, Field string }

// KubeError is why a write did not happen. Returned from Reconcile, it
// fails the reconcile (the key is requeued with backoff).
type KubeError struct {
	Reason  Reason
	Message string
	// Causes of an Invalid error.
	Causes []Cause
	// RetryAfterSeconds of a RateLimited error, when the server said.
	RetryAfterSeconds *uint64
	// Code of a ServerError.
	Code uint16
}

// Error is one line, worded as the other SDKs'.
func (e *KubeError) Error() string {
	switch e.Reason {
	case Invalid:
		var b strings.Builder
		b.WriteString("invalid: " + e.Message)
		for _, c := range e.Causes {
			fmt.Fprintf(&b, "; %s: %s", c.Field, c.Message)
		}
		return b.String()
	case RateLimited:
		if e.RetryAfterSeconds != nil {
			return fmt.Sprintf("rate limited (retry after %ds): %s", *e.RetryAfterSeconds, e.Message)
		}
	case ServerError:
		return fmt.Sprintf("server error %d: %s", e.Code, e.Message)
	}
	return strings.ReplaceAll(e.Reason.String(), "-", " ") + ": " + e.Message
}

// ReasonOf is the Reason of err when it is (or wraps) a *KubeError.
func ReasonOf(err error) (Reason, bool) {
	var k *KubeError
	if errors.As(err, &k) {
		return k.Reason, true
	}
	return 0, false
}

func IsNotFound(err error) bool      { r, ok := ReasonOf(err); return ok && r == NotFound }
func IsAlreadyExists(err error) bool { r, ok := ReasonOf(err); return ok && r == AlreadyExists }
func IsConflict(err error) bool      { r, ok := ReasonOf(err); return ok && r == Conflict }
func IsForbidden(err error) bool     { r, ok := ReasonOf(err); return ok && r == Forbidden }

// takeKubeError reads the `kube-error` at byte 8 of the return area.
func takeKubeError() *KubeError {
	e := &KubeError{Reason: Reason(at8(8))}
	if e.Reason != ServerError {
		e.Message = take(at32(16), at32(20))
	}
	switch e.Reason {
	case Invalid:
		ptr, n := at32(24), at32(28)
		for i := uint32(0); i < n; i++ {
			c := (*[6]uint32)(unsafe.Pointer(uintptr(ptr + 24*i)))
			e.Causes = append(e.Causes, Cause{Reason: take(c[0], c[1]), Message: take(c[2], c[3]), Field: take(c[4], c[5])})
		}
	case RateLimited:
		if at8(24) != 0 {
			seconds := at64(32)
			e.RetryAfterSeconds = &seconds
		}
	case ServerError:
		e.Code = *(*uint16)(unsafe.Add(kubeRetPtr(), 16))
		e.Message = take(at32(20), at32(24))
	}
	resetArena()
	return e
}

// body is a write's JSON: text as it is ([]byte, string, json.RawMessage)
// or any other value marshalled with encoding/json.
func body(v any) (string, error) {
	switch b := v.(type) {
	case string:
		return b, nil
	case []byte:
		return string(b), nil
	case json.RawMessage:
		return string(b), nil
	}
	text, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding a write's body: %w", err)
	}
	return string(text), nil
}

func writeObject(call func(unsafe.Pointer, uint32, unsafe.Pointer), object any) (string, error) {
	text, err := body(object)
	if err != nil {
		return "", err
	}
	p, n := strPtr(text)
	call(p, n, kubeRetPtr())
	return kubeString()
}

// Create creates the object (it names apiVersion, kind, namespace, name,
// or generateName) and answers it as stored, as JSON.
func Create(object any) (string, error) { return writeObject(kubeCreate, object) }

// Replace replaces the object; its metadata.resourceVersion, when set,
// must be current (else a Conflict).
func Replace(object any) (string, error) { return writeObject(kubeReplace, object) }

// ReplaceStatus replaces the object's status subresource.
func ReplaceStatus(object any) (string, error) { return writeObject(kubeReplaceStatus, object) }

// Target names one object. Namespace "" is a cluster-scoped object.
type Target struct{ APIVersion, Kind, Namespace, Name string }

// TargetOf is the object a cached version belongs to.
func TargetOf(obj *Object) Target {
	ns, _ := obj.Namespace()
	return Target{APIVersion: obj.APIVersion(), Kind: obj.Kind(), Namespace: ns, Name: obj.Name()}
}

// TargetOfJSON is the object a manifest names, and false when one of
// apiVersion, kind and metadata.name is missing.
func TargetOfJSON(manifest any) (Target, bool) {
	text, err := body(manifest)
	if err != nil {
		return Target{}, false
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	}
	if json.Unmarshal([]byte(text), &m) != nil || m.APIVersion == "" || m.Kind == "" || m.Metadata.Name == "" {
		return Target{}, false
	}
	return Target{m.APIVersion, m.Kind, m.Metadata.Namespace, m.Metadata.Name}, true
}

// String is `Kind namespace/name`, or `Kind name` for a cluster-scoped
// object (as the other SDKs write it).
func (t Target) String() string {
	if t.Namespace == "" {
		return t.Kind + " " + t.Name
	}
	return t.Kind + " " + t.Namespace + "/" + t.Name
}

// flat is the target's nine flat values.
func (t Target) flat() (ap unsafe.Pointer, an uint32, kp unsafe.Pointer, kn uint32, some uint32, np unsafe.Pointer, nn uint32, mp unsafe.Pointer, mn uint32) {
	ap, an = strPtr(t.APIVersion)
	kp, kn = strPtr(t.Kind)
	some, np, nn = optionalString(t.Namespace)
	mp, mn = strPtr(t.Name)
	return
}

// PatchBody is a patch by content type: MergePatch, JSONPatch or Apply.
type PatchBody struct {
	tag   uint32
	body  any
	force bool
}

// MergePatch is a JSON merge patch (RFC 7386).
func MergePatch(patch any) PatchBody { return PatchBody{tag: 0, body: patch} }

// JSONPatch is a JSON patch (RFC 6902).
func JSONPatch(patch any) PatchBody { return PatchBody{tag: 1, body: patch} }

// Apply is a server-side apply of config, with the plugin's name as field
// manager.
func Apply(config any) PatchBody { return PatchBody{tag: 2, body: config} }

// Force takes the fields other managers own instead of failing with a
// Conflict (an apply only).
func (p PatchBody) Force() PatchBody { p.force = p.tag == 2; return p }

type patchCall func(unsafe.Pointer, uint32, unsafe.Pointer, uint32, uint32, unsafe.Pointer, uint32, unsafe.Pointer, uint32, uint32, unsafe.Pointer, uint32, uint32, unsafe.Pointer)

func patch(call patchCall, t Target, p PatchBody) (string, error) {
	text, err := body(p.body)
	if err != nil {
		return "", err
	}
	ap, an, kp, kn, some, np, nn, mp, mn := t.flat()
	bp, bn := strPtr(text)
	force := uint32(0)
	if p.force {
		force = 1
	}
	call(ap, an, kp, kn, some, np, nn, mp, mn, p.tag, bp, bn, force, kubeRetPtr())
	return kubeString()
}

// Patch patches the object and answers it as stored, as JSON.
func Patch(t Target, p PatchBody) (string, error) { return patch(kubePatch, t, p) }

// PatchStatus patches the object's status subresource.
func PatchStatus(t Target, p PatchBody) (string, error) { return patch(kubePatchStatus, t, p) }

// Propagation of a delete to the object's dependents.
type Propagation int

const (
	// PropagationDefault leaves it to the server (the kind's default).
	PropagationDefault Propagation = iota
	Orphan
	Background
	Foreground
)

// DeleteOptions are a delete's preconditions and propagation.
type DeleteOptions struct {
	// UID: delete only if the object still has this uid.
	UID string
	// ResourceVersion: delete only if the object is still at this version.
	ResourceVersion string
	Propagation     Propagation
}

// deleteParams is delete's parameter tuple in memory (100 bytes,
// alignment 4): the target at byte 0 (api-version 0, kind 8, namespace
// 16 as an option, name 28), the options at 36 (uid 36 and
// resource-version 48 as options, propagation 60 as an option of an enum).
var deleteParams [25]uint32

func putString(off uintptr, s string) {
	p, n := strPtr(s)
	*(*uint32)(unsafe.Add(unsafe.Pointer(&deleteParams), off)) = uint32(uintptr(p))
	*(*uint32)(unsafe.Add(unsafe.Pointer(&deleteParams), off+4)) = n
}

func putOption(off uintptr, s string) {
	if s != "" {
		*(*byte)(unsafe.Add(unsafe.Pointer(&deleteParams), off)) = 1
		putString(off+4, s)
	}
}

// Delete deletes the object. It answers the object as JSON and true when
// it was only marked for deletion (it has finalizers), "" and false when
// it is gone.
func Delete(t Target, opts DeleteOptions) (string, bool, error) {
	deleteParams = [25]uint32{}
	putString(0, t.APIVersion)
	putString(8, t.Kind)
	putOption(16, t.Namespace)
	putString(28, t.Name)
	putOption(36, opts.UID)
	putOption(48, opts.ResourceVersion)
	if opts.Propagation != PropagationDefault {
		*(*byte)(unsafe.Add(unsafe.Pointer(&deleteParams), 60)) = 1
		*(*byte)(unsafe.Add(unsafe.Pointer(&deleteParams), 61)) = byte(opts.Propagation - Orphan)
	}
	kubeDelete(unsafe.Pointer(&deleteParams), kubeRetPtr())
	// The strings deleteParams points at must live until here.
	runtime.KeepAlive(t)
	runtime.KeepAlive(opts)
	if at8(0) != 0 {
		return "", false, takeKubeError()
	}
	// result<option<string>, kube-error>: the option at byte 8.
	if at8(8) == 0 {
		resetArena()
		return "", false, nil
	}
	return takeStringAt(at32(12), at32(16)), true, nil
}

// EventType of a recorded Event.
type EventType uint32

const (
	Normal EventType = iota
	Warning
)

// RecordEvent records an Event about `involved` (type, reason, message).
func RecordEvent(involved Target, eventType EventType, reason, message string) error {
	ap, an, kp, kn, some, np, nn, mp, mn := involved.flat()
	rp, rn := strPtr(reason)
	msgp, msgn := strPtr(message)
	kubeRecordEvent(ap, an, kp, kn, some, np, nn, mp, mn, uint32(eventType), rp, rn, msgp, msgn, kubeRetPtr())
	if at8(0) != 0 {
		return takeKubeError()
	}
	resetArena()
	return nil
}
