//go:build wasip1 && informer_controller

// A controller's world has no batch path: nothing to tell the host before
// a visible effect, and no object is ever lent or in a batch (its objects
// come from the cache and the stores).

package guest

func beforeVisibleEffect() {}

func deliveryLend(uint32) uint32 {
	panic("informer-host guest: no object is lent outside a batch")
}

func metaField(uint32, int) (string, bool) {
	panic("informer-host guest: a controller has no batch")
}

func metaLabels(uint32, func(k, v string) bool) {
	panic("informer-host guest: a controller has no batch")
}
