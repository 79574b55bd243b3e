module informerhost.dev/plugins/go-noop

go 1.24

require informerhost.dev/guest v0.0.0

replace informerhost.dev/guest => ../../../sdk/go
