//go:build tools

// Package e2etools pins the kwok and Cluster API core manager binaries that the
// local end-to-end stack builds from source. It is kept apart from hack/kube so
// that their dependencies never move the versions the Kubernetes binaries are
// built with.
package e2etools

import (
	_ "sigs.k8s.io/cluster-api/core"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
