// Does nothing: the benchmark baseline for the cost of a call (the twin of
// the Rust `noop` plugin).
package main

import "informerhost.dev/guest"

func init() { guest.Register(guest.NoopHandler{}) }

func main() {}
