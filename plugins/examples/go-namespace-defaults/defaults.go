// Namespace defaults, in Go: every Namespace labelled for a tenant gets a
// default ResourceQuota, LimitRange and RoleBinding, owned by the Namespace.
//
// The twin of the Rust `namespace-defaults` plugin (plugins/namespace-defaults,
// docs/controllers.md): the same configuration, the same informers, the same
// writes (one forced server-side apply per missing or changed default, none
// when everything is as configured) and the same log lines.
//
// Informers (names from the config, defaults shown):
//   - `namespaces` (v1 Namespaces): the primary; reconciled by name.
//   - `resourcequotas`, `limitranges` (v1), `rolebindings`
//     (rbac.authorization.k8s.io/v1): secondaries, which the host maps to
//     their owner through the ownerReference this controller sets.
//
// Write quantities in their canonical form (`500m`, not `0.5`): the API
// server stores that form, and a config that differs from it would be
// applied again on every resync.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"informerhost.dev/guest"
)

// maxWaits is how many reconciles in a row may pass over a default this
// controller wrote and the cache does not show yet, before writing it
// again.
const maxWaits = 5

type quota struct {
	Name string            `json:"name"`
	Hard map[string]string `json:"hard"`
}

type limitRange struct {
	Name   string `json:"name"`
	Limits []any  `json:"limits"`
}

type subject struct {
	Kind      string  `json:"kind"`
	Name      string  `json:"name"`
	Namespace *string `json:"namespace"`
}

type roleBinding struct {
	Name        string    `json:"name"`
	ClusterRole string    `json:"cluster_role"`
	Subjects    []subject `json:"subjects"`
}

// settings: a nil default leaves that kind alone (`null` in the config).
type settings struct {
	TenantLabel    string
	Namespaces     string
	ResourceQuotas string
	LimitRanges    string
	RoleBindings   string
	ResourceQuota  *quota
	LimitRange     *limitRange
	RoleBinding    *roleBinding
}

func defaults() settings {
	return settings{
		TenantLabel:    "informer-host.dev/tenant",
		Namespaces:     "namespaces",
		ResourceQuotas: "resourcequotas",
		LimitRanges:    "limitranges",
		RoleBindings:   "rolebindings",
		ResourceQuota: &quota{Name: "tenant-default", Hard: map[string]string{
			"pods": "50", "requests.cpu": "8", "requests.memory": "16Gi",
		}},
		LimitRange: &limitRange{Name: "tenant-default", Limits: []any{map[string]any{
			"type":           "Container",
			"default":        map[string]any{"cpu": "500m", "memory": "512Mi"},
			"defaultRequest": map[string]any{"cpu": "100m", "memory": "128Mi"},
		}}},
		RoleBinding: &roleBinding{Name: "tenant-admins", ClusterRole: "admin", Subjects: []subject{
			{Kind: "Group", Name: "tenant:{tenant}"},
		}},
	}
}

// parseSettings overrides the defaults with config; unknown fields are
// refused (like the Rust twin's deny_unknown_fields).
func parseSettings(config guest.Config) (settings, error) {
	s := defaults()
	var raw struct {
		TenantLabel    *string         `json:"tenant_label"`
		Namespaces     *string         `json:"namespaces"`
		ResourceQuotas *string         `json:"resourcequotas"`
		LimitRanges    *string         `json:"limitranges"`
		RoleBindings   *string         `json:"rolebindings"`
		ResourceQuota  json.RawMessage `json:"resource_quota"`
		LimitRange     json.RawMessage `json:"limit_range"`
		RoleBinding    json.RawMessage `json:"role_binding"`
	}
	if err := config.Decode(&raw); err != nil {
		return s, err
	}
	for _, f := range []struct {
		from *string
		to   *string
	}{{raw.TenantLabel, &s.TenantLabel}, {raw.Namespaces, &s.Namespaces}, {raw.ResourceQuotas, &s.ResourceQuotas},
		{raw.LimitRanges, &s.LimitRanges}, {raw.RoleBindings, &s.RoleBindings}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	var err error
	if s.ResourceQuota, err = kindSettings(raw.ResourceQuota, "resource_quota", s.ResourceQuota); err != nil {
		return s, err
	}
	if s.ResourceQuota != nil && s.ResourceQuota.Hard == nil {
		return s, errors.New("resource_quota.hard: missing or not an object")
	}
	if s.LimitRange, err = kindSettings(raw.LimitRange, "limit_range", s.LimitRange); err != nil {
		return s, err
	}
	if s.LimitRange != nil && s.LimitRange.Limits == nil {
		return s, errors.New("limit_range.limits: missing or not a list")
	}
	if s.RoleBinding, err = kindSettings(raw.RoleBinding, "role_binding", s.RoleBinding); err != nil {
		return s, err
	}
	if b := s.RoleBinding; b != nil {
		if b.ClusterRole == "" || b.Subjects == nil {
			return s, errors.New("role_binding: cluster_role and subjects are required")
		}
		for _, sub := range b.Subjects {
			if sub.Kind == "" || sub.Name == "" {
				return s, errors.New("role_binding.subjects: kind and name are required")
			}
		}
	}
	return s, nil
}

// kindSettings is one kind's settings: the default when absent, nil for
// `null`, else the given object (its name defaulting to the default's).
func kindSettings[T any](raw json.RawMessage, what string, def *T) (*T, error) {
	if raw == nil {
		return def, nil
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	value := new(T)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(value); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	// Each kind's first field is its name.
	name := reflect.ValueOf(value).Elem().Field(0)
	if name.String() == "" {
		name.SetString(reflect.ValueOf(def).Elem().Field(0).String())
	}
	return value, nil
}

type written struct {
	rv    string
	waits int
}

type namespaceDefaults struct {
	s settings
	// Defaults written whose write the cache has not shown yet, by target:
	// the informers of the other kinds can run ahead of this one's.
	written map[string]written
}

func (n *namespaceDefaults) Init(config guest.Config) error {
	s, err := parseSettings(config)
	n.s, n.written = s, map[string]written{}
	return err
}

func (n *namespaceDefaults) Reconcile(name string) (guest.Action, error) {
	s := n.s
	namespace, err := guest.StoreGet(s.Namespaces, name)
	if err != nil || namespace == nil {
		return guest.Done, err // deleted: what it owned goes with it
	}
	if _, terminating := namespace.Pointer("/metadata/deletionTimestamp"); terminating {
		return guest.Done, nil // the server refuses new objects in it
	}
	tenant, ok := namespace.Label(s.TenantLabel)
	if !ok {
		return guest.Done, nil // not a tenant's
	}
	uid, ok := namespace.UID()
	if !ok {
		return guest.Done, errors.New("a Namespace without a uid")
	}
	waiting := false
	for _, d := range n.desired(name, uid, tenant) {
		target, ok := guest.TargetOfJSON(d.object)
		if !ok {
			return guest.Done, errors.New("a default without a name")
		}
		var current map[string]any
		cached, err := guest.StoreGet(d.informer, name+"/"+target.Name)
		if err != nil {
			return guest.Done, err
		}
		if cached != nil {
			if err := cached.Decode(&current); err != nil {
				return guest.Done, err
			}
		}
		key := target.String()
		if current != nil && contains(current, d.object) {
			delete(n.written, key)
			continue // already as configured: no write
		}
		if w, ok := n.written[key]; ok && resourceVersion(current) != w.rv && w.waits < maxWaits {
			// Written, not in the cache yet: look again soon.
			n.written[key] = written{w.rv, w.waits + 1}
			waiting = true
			continue
		}
		// A RoleBinding's roleRef cannot change: replace the binding.
		if current != nil && target.Kind == "RoleBinding" && !reflect.DeepEqual(current["roleRef"], d.object["roleRef"]) {
			if _, _, err := guest.Delete(target, guest.DeleteOptions{UID: uidOf(current)}); err != nil {
				return guest.Done, err
			}
		}
		answer, err := guest.Patch(target, guest.Apply(d.object).Force())
		if err != nil {
			return guest.Done, err
		}
		var stored map[string]any
		if json.Unmarshal([]byte(answer), &stored) == nil {
			if rv := resourceVersion(stored); rv != "" {
				n.written[key] = written{rv: rv}
			}
		}
		verb := "created"
		if current != nil {
			verb = "updated"
		}
		guest.Info("%s %s for tenant %s", verb, target, tenant)
	}
	if waiting {
		return guest.RequeueAfter(time.Second), nil
	}
	return guest.Done, nil
}

type desired struct {
	informer string
	object   map[string]any
}

// desired is each configured default for Namespace `namespace` (with
// `uid`) of `tenant`, with the informer that caches its kind.
func (n *namespaceDefaults) desired(namespace, uid, tenant string) []desired {
	s := n.s
	metadata := func(name string) map[string]any {
		return map[string]any{
			"name":      name,
			"namespace": namespace,
			"labels":    map[string]any{"app.kubernetes.io/managed-by": "namespace-defaults", s.TenantLabel: tenant},
			"ownerReferences": []any{map[string]any{
				"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": uid, "controller": true,
			}},
		}
	}
	var out []desired
	if q := s.ResourceQuota; q != nil {
		hard := map[string]any{}
		for k, v := range q.Hard {
			hard[k] = v
		}
		out = append(out, desired{s.ResourceQuotas, map[string]any{
			"apiVersion": "v1", "kind": "ResourceQuota", "metadata": metadata(q.Name),
			"spec": map[string]any{"hard": hard},
		}})
	}
	if l := s.LimitRange; l != nil {
		out = append(out, desired{s.LimitRanges, map[string]any{
			"apiVersion": "v1", "kind": "LimitRange", "metadata": metadata(l.Name),
			"spec": map[string]any{"limits": l.Limits},
		}})
	}
	if b := s.RoleBinding; b != nil {
		subjects := []any{}
		for _, sub := range b.Subjects {
			// The server defaults apiGroup, and stores a ServiceAccount's
			// empty one as absent (omitempty): written the way it is stored,
			// the comparison with the cache stays exact.
			value := map[string]any{"kind": sub.Kind, "name": strings.ReplaceAll(sub.Name, "{tenant}", tenant)}
			if sub.Kind != "ServiceAccount" {
				value["apiGroup"] = "rbac.authorization.k8s.io"
			}
			if sub.Namespace != nil {
				value["namespace"] = strings.ReplaceAll(*sub.Namespace, "{tenant}", tenant)
			}
			subjects = append(subjects, value)
		}
		out = append(out, desired{s.RoleBindings, map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata(b.Name),
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": b.ClusterRole},
			"subjects": subjects,
		}})
	}
	return out
}

// contains reports whether actual has every field of desired with the same
// value. Fields only actual has (status, server defaults, others' labels)
// do not count; lists must match item by item. desired is compared in its
// JSON form, so both sides are JSON values of the same Go types.
func contains(actual any, desired any) bool {
	return containsJSON(actual, toJSON(desired))
}

func toJSON(v any) any {
	text, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(text, &out)
	return out
}

func containsJSON(actual, desired any) bool {
	switch d := desired.(type) {
	case map[string]any:
		a, ok := actual.(map[string]any)
		if !ok {
			return false
		}
		for k, dv := range d {
			av, ok := a[k]
			if !ok || !containsJSON(av, dv) {
				return false
			}
		}
		return true
	case []any:
		a, ok := actual.([]any)
		if !ok || len(a) != len(d) {
			return false
		}
		for i := range d {
			if !containsJSON(a[i], d[i]) {
				return false
			}
		}
		return true
	}
	return actual == desired
}

func resourceVersion(obj map[string]any) string {
	metadata, _ := obj["metadata"].(map[string]any)
	rv, _ := metadata["resourceVersion"].(string)
	return rv
}

func uidOf(obj map[string]any) string {
	metadata, _ := obj["metadata"].(map[string]any)
	uid, _ := metadata["uid"].(string)
	return uid
}

func init() { guest.RegisterReconciler(&namespaceDefaults{written: map[string]written{}}) }

func main() {}
