// The Go twin of the Rust `recorder` plugin: logs exactly one info line per
// notification, in the format of `describe`, and `init <config>` on init.
// With `{"throw_on": "<name>"}` it panics (a trap, like a Rust panic) on
// every notification about an object of that name; with
// `{"fail_on": "<name>"}` it returns an error for it instead; with
// `{"check_json": true}` it checks every accessor of the SDK against the
// object's body first (see checkJSON).
package main

import (
	"fmt"

	"informerhost.dev/guest"
)

type recorder struct {
	ThrowOn string `json:"throw_on"`
	FailOn  string `json:"fail_on"`
	// CheckJSON: before logging, decode every object it receives and
	// return an error unless the body, the pointer getter and the
	// metadata accessors agree.
	CheckJSON bool `json:"check_json"`
}

// configMap is the part of an object checkJSON reads.
type configMap struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

func checkJSON(obj *guest.Object) error {
	var cm configMap
	if err := obj.Decode(&cm); err != nil {
		return fmt.Errorf("decoding %s: %w", obj.Key(), err)
	}
	ns, _ := obj.Namespace()
	rv, _ := obj.ResourceVersion()
	if cm.Kind != obj.Kind() || cm.Metadata.Name != obj.Name() || cm.Metadata.Namespace != ns || cm.Metadata.ResourceVersion != rv {
		return fmt.Errorf("the body of %s disagrees with its metadata", obj.Key())
	}
	var name string
	if found, err := obj.DecodePointer("/metadata/name", &name); !found || err != nil || name != obj.Name() {
		return fmt.Errorf("pointer /metadata/name of %s: %q %v %v", obj.Key(), name, found, err)
	}
	if _, found := obj.Pointer("/no/such/field"); found {
		return fmt.Errorf("a missing pointer was found in %s", obj.Key())
	}
	labels := obj.Labels()
	if len(labels) != len(cm.Metadata.Labels) {
		return fmt.Errorf("%s: %d labels, %d in the body", obj.Key(), len(labels), len(cm.Metadata.Labels))
	}
	for _, l := range labels {
		if v, ok := obj.Label(l.Key); !ok || v != l.Value || cm.Metadata.Labels[l.Key] != v {
			return fmt.Errorf("%s: label %s disagrees", obj.Key(), l.Key)
		}
	}
	if len(obj.JSON()) == 0 {
		return fmt.Errorf("%s: empty JSON", obj.Key())
	}
	return nil
}

func (r *recorder) Init(config guest.Config) error {
	guest.Info("init %s", string(config))
	return config.Decode(r)
}

func (r *recorder) check(name string) error {
	if r.ThrowOn != "" && name == r.ThrowOn {
		panic(fmt.Sprintf("told to throw on %s", name))
	}
	if r.FailOn != "" && name == r.FailOn {
		return fmt.Errorf("told to fail on %s", name)
	}
	return nil
}

func (r *recorder) OnAdd(obj *guest.Object, isInInitialList bool) error {
	if err := r.check(obj.Name()); err != nil {
		return err
	}
	if r.CheckJSON {
		if err := checkJSON(obj); err != nil {
			return err
		}
	}
	guest.Info("%s", guest.DescribeAdd(obj, isInInitialList))
	return nil
}

func (r *recorder) OnUpdate(old, new *guest.Object) error {
	if err := r.check(new.Name()); err != nil {
		return err
	}
	if r.CheckJSON {
		for _, o := range []*guest.Object{old, new} {
			if err := checkJSON(o); err != nil {
				return err
			}
		}
	}
	guest.Info("%s", guest.DescribeUpdate(old, new))
	return nil
}

func (r *recorder) OnDelete(obj *guest.Deleted) error {
	if err := r.check(obj.Name()); err != nil {
		return err
	}
	guest.Info("%s", guest.DescribeDelete(obj))
	return nil
}

func init() { guest.Register(&recorder{}) }

func main() {}
