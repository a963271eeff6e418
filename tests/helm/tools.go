//go:build tools

// Builds Helm for the end-to-end tests, which render the webhook's chart with it.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
