// Package framework holds what the end-to-end specs of e2e share on
// the local stack (e2e/framework/localstack): Clusters of the simulated
// provider and their node groups, workloads, ClusterAutoscalers, the waits
// and checks around them, and the invariants a cluster autoscaler must keep
// whatever fails around it. Every helper that talks to an API server takes
// the spec's context first.
package framework
