package convert

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// workload is a pod template of a Deployment, a Pod or another workload.
type workload struct {
	kind, namespace, name string
	pod                   corev1.PodSpec
}

// autoscalerContainer is the container of a workload that runs the
// upstream cluster-autoscaler.
type autoscalerContainer struct {
	workload  *workload
	container *corev1.Container
}

func (a autoscalerContainer) String() string {
	return fmt.Sprintf("%s %s, container %s", a.workload.kind, namespacedName(a.workload.namespace, a.workload.name), a.container.Name)
}

func namespacedName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// readDeployment reads the command line of the upstream cluster-autoscaler
// from a Deployment, a Pod or another workload, in YAML or JSON, among any
// other objects (a whole manifest, or a List). container names the
// container when it is not found by its image or flags.
func readDeployment(data []byte, file, container string) (convertInput, error) {
	workloads, err := decodeWorkloads(data)
	if err != nil {
		return convertInput{}, fmt.Errorf("reading %s: %w", file, err)
	}
	found := findAutoscalerContainers(workloads, container)
	switch {
	case len(found) == 0 && container != "":
		return convertInput{}, fmt.Errorf("%s has no container %s", file, container)
	case len(found) == 0:
		return convertInput{}, fmt.Errorf("%s has no cluster-autoscaler container: no Deployment or Pod with a container whose image is cluster-autoscaler or that has --cloud-provider; name it with --container", file)
	case len(found) > 1:
		names := make([]string, 0, len(found))
		for _, f := range found {
			names = append(names, f.String())
		}
		return convertInput{}, fmt.Errorf("%s has several cluster-autoscaler containers (%s): convert one at a time, or name it with --container", file, strings.Join(names, "; "))
	}
	return inputOfContainer(found[0], file), nil
}

// decodeWorkloads reads the pod templates of every document in data.
func decodeWorkloads(data []byte) ([]workload, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var workloads []workload
	for {
		var object map[string]any
		err := decoder.Decode(&object)
		if errors.Is(err, io.EOF) {
			return workloads, nil
		}
		if err != nil {
			return nil, err
		}
		found, err := workloadsOf(object)
		if err != nil {
			return nil, err
		}
		workloads = append(workloads, found...)
	}
}

// workloadsOf is the pod template of object, or those of a List's items.
func workloadsOf(object map[string]any) ([]workload, error) {
	if object == nil {
		return nil, nil
	}
	u := unstructured.Unstructured{Object: object}
	if u.IsList() {
		var workloads []workload
		err := u.EachListItem(func(item runtime.Object) error {
			found, err := workloadsOf(item.(*unstructured.Unstructured).Object)
			workloads = append(workloads, found...)
			return err
		})
		return workloads, err
	}
	specPath := []string{"spec", "template", "spec"}
	if u.GetKind() == "Pod" {
		specPath = []string{"spec"}
	}
	w := workload{kind: u.GetKind(), namespace: u.GetNamespace(), name: u.GetName()}
	podSpec, found, err := unstructured.NestedMap(object, specPath...)
	if err != nil {
		return nil, fmt.Errorf("the pod template of %s %s: %w", w.kind, namespacedName(w.namespace, w.name), err)
	}
	if !found {
		return nil, nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(podSpec, &w.pod); err != nil {
		return nil, fmt.Errorf("the pod template of %s %s: %w", w.kind, namespacedName(w.namespace, w.name), err)
	}
	return []workload{w}, nil
}

// findAutoscalerContainers finds the containers named name, or else those
// that look like the upstream cluster-autoscaler.
func findAutoscalerContainers(workloads []workload, name string) []autoscalerContainer {
	var found []autoscalerContainer
	for i := range workloads {
		w := &workloads[i]
		for j := range w.pod.Containers {
			c := &w.pod.Containers[j]
			if name == c.Name || (name == "" && looksLikeAutoscaler(c)) {
				found = append(found, autoscalerContainer{workload: w, container: c})
			}
		}
	}
	return found
}

func looksLikeAutoscaler(c *corev1.Container) bool {
	if strings.Contains(c.Image, "cluster-autoscaler") {
		return true
	}
	return slices.ContainsFunc(append(slices.Clone(c.Command), c.Args...), func(arg string) bool {
		return strings.Contains(arg, "--cloud-provider") || strings.Contains(arg, "cluster-autoscaler")
	})
}

// inputOfContainer is the command line of the container, its variables
// expanded as the kubelet expands them.
func inputOfContainer(found autoscalerContainer, file string) convertInput {
	c := found.container
	in := convertInput{
		source:   fmt.Sprintf("%s (%s)", found, file),
		image:    c.Image,
		secretOf: secretFiles(found.workload, c),
	}
	env := literalEnv(c)
	for _, arg := range append(slices.Clone(c.Command), c.Args...) {
		expanded, missing := expandEnv(arg, env)
		for _, name := range missing {
			in.warnings = append(in.warnings, fmt.Sprintf("%q uses $(%s), whose value is not written in the container: it is converted as written", arg, name))
		}
		in.args = append(in.args, expanded)
	}
	if len(c.Command) == 0 {
		// The image's entrypoint is the program.
		in.args = append([]string{"/cluster-autoscaler"}, in.args...)
	}
	if script, ok := shellScript(in.args); ok {
		words, err := splitCommandLine(script)
		if err != nil {
			in.warnings = append(in.warnings, fmt.Sprintf("the shell script %q: %v", script, err))
		}
		if len(words) > 0 && words[0] == "exec" {
			words = words[1:]
		}
		in.args = words
	}
	for _, name := range []string{"CAPI_GROUP", "CAPI_VERSION"} {
		if value, ok := env[name]; ok {
			in.warnings = append(in.warnings, fmt.Sprintf("the container sets %s=%s: capi-autoscaler works with the Cluster API group and version it is built for", name, value))
		}
	}
	return in
}

// shellScript is the script of a command line sh -c SCRIPT, as a
// container that wraps the program in a shell runs.
func shellScript(args []string) (string, bool) {
	if len(args) < 3 || args[1] != "-c" {
		return "", false
	}
	switch path.Base(args[0]) {
	case "sh", "bash", "ash", "dash":
		return args[2], true
	}
	return "", false
}

// literalEnv are the variables of the container whose values it writes.
func literalEnv(c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

// expandEnv expands $(NAME) as the kubelet does: $$ is a dollar, and a
// variable it does not know stays as written; missing names those.
func expandEnv(s string, env map[string]string) (expanded string, missing []string) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case s[i+1] == '$':
			b.WriteByte('$')
			i++
		case s[i+1] == '(' && strings.IndexByte(s[i:], ')') > 0:
			end := i + strings.IndexByte(s[i:], ')')
			name := s[i+2 : end]
			if value, ok := env[name]; ok {
				b.WriteString(value)
			} else {
				b.WriteString(s[i : end+1])
				missing = append(missing, name)
			}
			i = end
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), missing
}

// secretFiles says which Secret, and key, a file of the container is.
func secretFiles(w *workload, c *corev1.Container) func(string) (secretFile, bool) {
	secrets := map[string]*corev1.SecretVolumeSource{}
	for _, v := range w.pod.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret
		}
	}
	return func(file string) (secretFile, bool) {
		for _, m := range c.VolumeMounts {
			volume := secrets[m.Name]
			if volume == nil {
				continue
			}
			if key, ok := keyOfMountedFile(volume, m, path.Clean(file)); ok {
				return secretFile{namespace: w.namespace, name: volume.SecretName, key: key}, true
			}
		}
		return secretFile{}, false
	}
}

// keyOfMountedFile is the key of the Secret that mount shows as file.
func keyOfMountedFile(volume *corev1.SecretVolumeSource, mount corev1.VolumeMount, file string) (string, bool) {
	mountPath := path.Clean(mount.MountPath)
	var inVolume string
	switch {
	case mount.SubPath != "" && file == mountPath:
		inVolume = mount.SubPath
	case mount.SubPath == "" && strings.HasPrefix(file, mountPath+"/"):
		inVolume = strings.TrimPrefix(file, mountPath+"/")
	default:
		return "", false
	}
	if len(volume.Items) == 0 {
		return inVolume, !strings.Contains(inVolume, "/")
	}
	for _, item := range volume.Items {
		if path.Clean(item.Path) == inVolume {
			return item.Key, true
		}
	}
	return "", false
}
