package v1alpha1

import (
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	// ReadyCondition is the condition the Cluster API contract reads from
	// infrastructure objects.
	ReadyCondition = clusterv1.ReadyCondition

	// AvailableCondition is the condition the Cluster API contract reads from
	// control plane objects.
	AvailableCondition = clusterv1.AvailableCondition

	// ProvisionedReason says that the simulated resource is provisioned.
	ProvisionedReason = "Provisioned"

	// ProvisioningReason says that the simulated resource is being provisioned.
	ProvisioningReason = "Provisioning"

	// ProvisioningFailedReason says that provisioning failed for good.
	ProvisioningFailedReason = "ProvisioningFailed"

	// MachineFinalizer lets the provider delete the Node of a SimMachine.
	MachineFinalizer = "infrastructure.e2e.capi-autoscaler.io/simmachine"

	// ProviderIDPrefix starts the provider ID of every simulated machine.
	ProviderIDPrefix = "sim://"
)
