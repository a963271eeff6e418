//go:build tools

// Keeps KWOK's controller (the simulated kubelets of the soak's nodes) in this module's graph.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
