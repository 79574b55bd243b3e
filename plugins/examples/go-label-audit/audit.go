// The Go twin of the Rust `label-audit` plugin: warns about added or
// updated objects that lack any of the labels named in its config
// (`{"required": ["app", "team"]}`). Reads metadata only.
package main

import (
	"strings"

	"informerhost.dev/guest"
)

type labelAudit struct {
	guest.NoopHandler
	Required []string `json:"required"`
}

func (a *labelAudit) Init(config guest.Config) error { return config.Decode(a) }

func (a *labelAudit) audit(obj *guest.Object) {
	var missing []string
	for _, label := range a.Required {
		if _, ok := obj.Label(label); !ok {
			missing = append(missing, label)
		}
	}
	if len(missing) > 0 {
		guest.Warn("%s %s is missing required labels: %s", obj.Kind(), obj.Key(), strings.Join(missing, ", "))
	}
}

func (a *labelAudit) OnAdd(obj *guest.Object, _ bool) error { a.audit(obj); return nil }

func (a *labelAudit) OnUpdate(_, new *guest.Object) error { a.audit(new); return nil }

func init() { guest.Register(&labelAudit{}) }

func main() {}
