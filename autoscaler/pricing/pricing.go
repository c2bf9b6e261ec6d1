// Package pricing is the one place that says what nodes cost the engine:
// the price of a node of a group per hour, from the group itself (its
// price annotation), from the price table by the node's instance type, or,
// without either, in proportion to the node's capacity at the default
// rates; and what pods are worth at those rates, which the price expander
// weighs the cost of new nodes against. Prices are in whatever currency
// the user prices in; the default rates are in US dollars.
package pricing

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
)

// Price is an amount per hour in millionths of the currency unit. Whole
// numbers keep sums exact, so that options that cost the same tie.
type Price int64

// microsPerUnit are the millionths in one unit of the currency.
const microsPerUnit = 1_000_000

// DecimalPattern is what a price is written as: up to 9 digits, then
// optionally a point and up to 6 more, e.g. "0.192". No sign, exponent or
// unit, so that a typo is refused rather than read as another price; the
// bounds keep every price exact in a Price. The ClusterAutoscaler CRD
// states the same pattern for spec.instanceTypePrices.
const DecimalPattern = `^[0-9]{1,9}(\.[0-9]{1,6})?$`

var decimal = regexp.MustCompile(DecimalPattern)

// Parse reads a price written as DecimalPattern says.
func Parse(value string) (Price, error) {
	if !decimal.MatchString(value) {
		return 0, errors.New("not a decimal price such as 0.192 (up to 9 digits, a point and up to 6 decimals, no sign or unit)")
	}
	units, fraction, _ := strings.Cut(value, ".")
	// Digits only, at most 9 of them: neither parse can fail.
	whole, _ := strconv.ParseInt(units, 10, 64)
	micros, _ := strconv.ParseInt((fraction + "000000")[:6], 10, 64)
	return Price(whole*microsPerUnit + micros), nil
}

// String writes the price as Parse reads it, without trailing zeros.
func (p Price) String() string {
	whole, micros := int64(p)/microsPerUnit, int64(p)%microsPerUnit
	if micros == 0 {
		return strconv.FormatInt(whole, 10)
	}
	return strings.TrimRight(fmt.Sprintf("%d.%06d", whole, micros), "0")
}

// The default rates price a node that has no price of its own and whose
// instance type the table does not list, in proportion to its capacity,
// and value pods by their requests. They are the base rates of upstream's
// GCE pricing model (on-demand n1 cpu and memory, and its GPU), so that
// defaults and real prices in US dollars compare sensibly. What matters to
// the price expander is their ratio: a cpu costs as much as about 7.5 GiB.
const (
	// DefaultPerCPU is the price of a cpu per hour: 0.033174.
	DefaultPerCPU Price = 33_174
	// DefaultPerGiB is the price of a GiB of memory per hour: 0.004446.
	DefaultPerGiB Price = 4_446
	// DefaultPerGPU is the price of a GPU (nodefacts.GPUResources) per hour: 0.7.
	DefaultPerGPU Price = 700_000
)

// bytesPerMiB and mibPerGiB convert memory to the GiB DefaultPerGiB
// prices, by whole MiB so that a petabyte does not overflow.
const (
	bytesPerMiB = 1 << 20
	mibPerGiB   = 1 << 10
)

// Resources are what the default rates price: cpu, memory and GPUs.
type Resources struct {
	MilliCPU    int64
	MemoryBytes int64
	GPUs        int64
}

// AtDefaultRates is what the resources cost per hour at the default rates,
// rounded down to a millionth.
func (r Resources) AtDefaultRates() Price {
	cpu := r.MilliCPU * int64(DefaultPerCPU) / 1000
	memory := r.MemoryBytes / bytesPerMiB * int64(DefaultPerGiB) / mibPerGiB
	return Price(cpu + memory + r.GPUs*int64(DefaultPerGPU))
}

// CapacityOf is the capacity of a node as the default rates price it.
func CapacityOf(node *corev1.Node) Resources {
	capacity := node.Status.Capacity
	gpu := nodefacts.GPUResource(func(name corev1.ResourceName) int64 {
		quantity := capacity[name]
		return quantity.Value()
	})
	resources := Resources{MilliCPU: capacity.Cpu().MilliValue(), MemoryBytes: capacity.Memory().Value()}
	if gpu != "" {
		quantity := capacity[gpu]
		resources.GPUs = quantity.Value()
	}
	return resources
}

// Source says where the price of a node group comes from.
type Source string

const (
	// SourceNodeGroup is a price the group gives itself: on Cluster API,
	// its capacity.cluster-autoscaler.kubernetes.io/price annotation.
	SourceNodeGroup Source = "NodeGroup"
	// SourceInstanceType is the price table's for the node's instance type.
	SourceInstanceType Source = "InstanceType"
	// SourceDefault is the default rates' for the node's capacity.
	SourceDefault Source = "Default"
)

// Quote is the price of a node of a group and where it comes from. The
// zero Quote is no price: the group's node is not known.
type Quote struct {
	PerHour Price
	Source  Source
}

// Table gives the price of nodes by instance type: the value of their
// node.kubernetes.io/instance-type label.
type Table map[string]Price

// NodePrice is what node, a node of a group, costs per hour: own, the
// group's own price, when it has one; else the table's price for the
// node's instance type; else the default rates' price for its capacity.
// node is nil when it is not known, and so then is any price but own.
func (t Table) NodePrice(own *Price, node *corev1.Node) Quote {
	switch {
	case own != nil:
		return Quote{PerHour: *own, Source: SourceNodeGroup}
	case node == nil:
		return Quote{}
	}
	if price, ok := t[node.Labels[corev1.LabelInstanceTypeStable]]; ok {
		return Quote{PerHour: price, Source: SourceInstanceType}
	}
	return Quote{PerHour: CapacityOf(node).AtDefaultRates(), Source: SourceDefault}
}
