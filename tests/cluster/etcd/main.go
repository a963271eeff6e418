// etcd for the end-to-end tests, built from go.etcd.io/etcd/server/v3 (its own go.mod carries
// replace directives, so it cannot be installed directly).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
