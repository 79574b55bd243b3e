// A test controller for the Go SDK's canonical-ABI glue of world
// `controller` (tests/tests/all/go_plugins.rs): reconciling `ns/probe`
// calls every `kube` write once, in a fixed order, with arguments that
// exercise every field of the parameters (an option set and unset, each
// patch type, each propagation), and logs what each answered, so a test
// with a scripted writer can check both directions of every layout. It
// also reads the stores, enqueues a key, and maps `trigger` objects of
// its secondary informer to two keys.
package main

import (
	"fmt"
	"time"

	"informerhost.dev/guest"
)

type probe struct{}

func (probe) Init(guest.Config) error { return nil }

func describe(op string, answer string, err error) {
	if err != nil {
		reason, _ := guest.ReasonOf(err)
		detail := ""
		if k, ok := err.(*guest.KubeError); ok {
			if k.RetryAfterSeconds != nil {
				detail = fmt.Sprintf(" retry=%d", *k.RetryAfterSeconds)
			}
			for _, c := range k.Causes {
				detail += fmt.Sprintf(" cause=%s|%s|%s", c.Field, c.Reason, c.Message)
			}
			if k.Code != 0 {
				detail += fmt.Sprintf(" code=%d", k.Code)
			}
		}
		guest.Info("%s err %s%s: %s", op, reason, detail, err)
		return
	}
	guest.Info("%s ok %s", op, answer)
}

const cm = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1","namespace":"ns"}}`

func (probe) Reconcile(key string) (guest.Action, error) {
	guest.Info("reconcile %s", key)
	if key != "ns/probe" {
		return guest.Done, nil
	}
	in := guest.Target{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "p1"}
	cluster := guest.Target{APIVersion: "v1", Kind: "Namespace", Name: "n1"}

	answer, err := guest.Create(cm)
	describe("create", answer, err)
	answer, err = guest.Replace(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c1", "namespace": "ns", "resourceVersion": "7"}})
	describe("replace", answer, err)
	answer, err = guest.Patch(in, guest.MergePatch(`{"data":{"a":"1"}}`))
	describe("patch-merge", answer, err)
	answer, err = guest.Patch(cluster, guest.JSONPatch(`[{"op":"add","path":"/metadata/labels/x","value":"y"}]`))
	describe("patch-json", answer, err)
	answer, err = guest.Patch(in, guest.Apply(cm).Force())
	describe("patch-apply-force", answer, err)
	answer, err = guest.PatchStatus(in, guest.Apply(cm))
	describe("patch-status-apply", answer, err)
	answer, err = guest.ReplaceStatus(cm)
	describe("replace-status", answer, err)
	answer, marked, err := guest.Delete(in, guest.DeleteOptions{UID: "u1", ResourceVersion: "42", Propagation: guest.Foreground})
	describe(fmt.Sprintf("delete-marked=%t", marked), answer, err)
	answer, marked, err = guest.Delete(cluster, guest.DeleteOptions{})
	describe(fmt.Sprintf("delete-marked=%t", marked), answer, err)
	_, _, err = guest.Delete(in, guest.DeleteOptions{Propagation: guest.Orphan})
	describe("delete-orphan", "", err)
	err = guest.RecordEvent(in, guest.Warning, "Probed", "a warning")
	describe("event-warning", "", err)
	err = guest.RecordEvent(cluster, guest.Normal, "Probed", "a normal one")
	describe("event-normal", "", err)
	answer, err = guest.Create(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"c-","namespace":"ns"}}`)
	describe("create-generate", answer, err)

	all, err := guest.StoreList("cms", "")
	if err != nil {
		return guest.Done, err
	}
	inNs, _ := guest.StoreList("cms", "ns")
	indexed, _ := guest.StoreByIndex("cms", "namespace", "ns")
	got, _ := guest.StoreGet("cms", "ns/probe")
	missing, _ := guest.StoreGet("cms", "ns/none")
	_, unknown := guest.StoreGet("no-such-informer", "ns/probe")
	guest.Info("stores all=%d ns=%d indexed=%d probe=%t none=%t unknown=%v", len(all), len(inNs), len(indexed),
		got != nil && got.Name() == "probe", missing != nil, unknown)
	guest.Enqueue("ns/enqueued", 0)
	guest.Enqueue("ns/later", 50*time.Millisecond)
	return guest.Done, nil
}

func (probe) Map(informer string, obj *guest.Object) []string {
	if obj.Name() != "trigger" {
		return nil
	}
	return []string{"ns/mapped-by-" + informer, "ns/also-mapped"}
}

func init() { guest.RegisterReconciler(probe{}) }

func main() {}
