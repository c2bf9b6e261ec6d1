package framework

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// ContainerCommand returns the arguments and environment a container of a
// Deployment's pod named podName runs with, as the kubelet gives them: the
// env entries with their values, those of the downward API filled in (the
// pod's namespace, name and UID, the container's resources), and the
// $(NAME) references of the arguments expanded.
func ContainerCommand(deployment *appsv1.Deployment, container, podName string) (args, env []string, err error) {
	index := slices.IndexFunc(deployment.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == container })
	if index < 0 {
		return nil, nil, fmt.Errorf("the Deployment %s has no container %s", deployment.Name, container)
	}
	c := deployment.Spec.Template.Spec.Containers[index]
	if len(c.EnvFrom) > 0 {
		return nil, nil, fmt.Errorf("container %s takes env from ConfigMaps or Secrets, which ContainerCommand does not read", container)
	}
	values := map[string]string{}
	for _, variable := range c.Env {
		value, err := envValue(deployment, c, podName, variable)
		if err != nil {
			return nil, nil, err
		}
		value = expand(value, values)
		values[variable.Name] = value
		env = append(env, variable.Name+"="+value)
	}
	for _, arg := range slices.Concat(c.Command, c.Args) {
		args = append(args, expand(arg, values))
	}
	if len(c.Command) > 0 {
		// The binary is the caller's; its arguments follow the command.
		args = args[1:]
	}
	return args, env, nil
}

func envValue(deployment *appsv1.Deployment, c corev1.Container, podName string, variable corev1.EnvVar) (string, error) {
	switch from := variable.ValueFrom; {
	case from == nil:
		return variable.Value, nil
	case from.FieldRef != nil:
		switch from.FieldRef.FieldPath {
		case "metadata.namespace":
			return deployment.Namespace, nil
		case "metadata.name":
			return podName, nil
		case "metadata.uid":
			return string(uuid.NewUUID()), nil
		}
		return "", fmt.Errorf("env %s: the field %s is not one ContainerCommand fills in", variable.Name, from.FieldRef.FieldPath)
	case from.ResourceFieldRef != nil:
		requirement, name, _ := strings.Cut(from.ResourceFieldRef.Resource, ".")
		resources := map[string]corev1.ResourceList{"limits": c.Resources.Limits, "requests": c.Resources.Requests}[requirement]
		quantity, found := resources[corev1.ResourceName(name)]
		if !found {
			return "", fmt.Errorf("env %s: the container sets no %s", variable.Name, from.ResourceFieldRef.Resource)
		}
		divisor := from.ResourceFieldRef.Divisor
		if divisor.IsZero() {
			divisor = resource.MustParse("1")
		}
		return fmt.Sprint((quantity.MilliValue() + divisor.MilliValue() - 1) / divisor.MilliValue()), nil
	}
	return "", fmt.Errorf("env %s: comes from a ConfigMap or Secret, which ContainerCommand does not read", variable.Name)
}

// reference is a $(NAME) of a container's arguments or env, or the escaped
// $$.
var reference = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand replaces the references to defined variables, as the kubelet does.
func expand(value string, variables map[string]string) string {
	return reference.ReplaceAllStringFunc(value, func(match string) string {
		if match == "$$" {
			return "$"
		}
		if value, defined := variables[match[2:len(match)-1]]; defined {
			return value
		}
		return match
	})
}

// WithFlags replaces the flags of args, --name=value, that flags set, and
// adds the others.
func WithFlags(args []string, flags ...string) []string {
	args = slices.Clone(args)
	for _, flag := range flags {
		name, _, _ := strings.Cut(flag, "=")
		index := slices.IndexFunc(args, func(arg string) bool {
			argName, _, _ := strings.Cut(arg, "=")
			return argName == name
		})
		if index < 0 {
			args = append(args, flag)
		} else {
			args[index] = flag
		}
	}
	return args
}

// StartDeploymentInput is the input of StartDeployment.
type StartDeploymentInput struct {
	Stack *localstack.Stack
	// Name of the process, and of its log.
	Name string
	// Binary runs as the container.
	Binary     string
	Deployment *appsv1.Deployment
	Container  string
	// Flags replace the container's flags of the same names, or are added
	// (WithFlags): a kubeconfig, ports of this machine's.
	Flags []string
}

// StartDeployment runs Binary on the stack as a container of the
// Deployment's pod would run (ContainerCommand), as the pod <Deployment>-0.
func StartDeployment(ctx context.Context, input StartDeploymentInput) *localstack.Process {
	GinkgoHelper()
	args, env, err := ContainerCommand(input.Deployment, input.Container, input.Deployment.Name+"-0")
	Expect(err).NotTo(HaveOccurred())
	By(fmt.Sprintf("Starting %s as the container %s of Deployment %s/%s: %s", input.Name, input.Container, input.Deployment.Namespace, input.Deployment.Name,
		strings.Join(WithFlags(args, input.Flags...), " ")))
	p, err := input.Stack.StartProcessWithEnv(ctx, input.Name, input.Binary, env, WithFlags(args, input.Flags...)...)
	Expect(err).NotTo(HaveOccurred())
	return p
}
