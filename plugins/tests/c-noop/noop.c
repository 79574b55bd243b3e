// Does nothing: the benchmark baseline for the cost of a call (the twin of
// the Rust `noop` plugin). The SDK's default handler functions are no-ops.
#include "informer_guest.h"
