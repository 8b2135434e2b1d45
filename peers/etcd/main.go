// The small cluster's etcd: what etcd's own main does, over the server module the Go module proxy serves.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
