// When an object named by its config (`{"name": "x"}`) arrives, allocates
// and touches Go heap memory in 1 MiB steps, keeping all of it, until the
// host refuses to grow the linear memory (the Go runtime then dies of
// "out of memory": a trap); otherwise logs like the recorder.
package main

import "informerhost.dev/guest"

type hog struct {
	Name string `json:"name"`
}

var kept [][]byte

func (h *hog) Init(config guest.Config) error {
	guest.Info("init %s", string(config))
	return config.Decode(h)
}

func (h *hog) check(name string) {
	if h.Name == "" || name != h.Name {
		return
	}
	for {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		kept = append(kept, b)
	}
}

func (h *hog) OnAdd(obj *guest.Object, isInInitialList bool) error {
	h.check(obj.Name())
	guest.Info("%s", guest.DescribeAdd(obj, isInInitialList))
	return nil
}

func (h *hog) OnUpdate(old, new *guest.Object) error {
	h.check(new.Name())
	guest.Info("%s", guest.DescribeUpdate(old, new))
	return nil
}

func (h *hog) OnDelete(obj *guest.Deleted) error {
	h.check(obj.Name())
	guest.Info("%s", guest.DescribeDelete(obj))
	return nil
}

func init() { guest.Register(&hog{}) }

func main() {}
