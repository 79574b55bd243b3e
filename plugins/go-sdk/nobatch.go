//go:build wasip1 && informer_controller

// A controller's world has no batch path: nothing to tell the host before
// a visible effect, and no object is ever lent.

package guest

func beforeVisibleEffect() {}

func deliveryLend(uint32) uint32 {
	panic("informer-host guest: no object is lent outside a batch")
}
