module informerhost.dev/guest

go 1.24
