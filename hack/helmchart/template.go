package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// templateFile is one file of templates/: YAML documents of config/'s
// objects in which placeholders stand for Helm template expressions. The
// objects are edited as YAML nodes, so that what config/ says (and its
// comments) comes through as kustomize wrote it, and only then are the
// placeholders replaced, in the text:
//   - an expression (expr) replaces its placeholder where it stands, inside
//     a scalar: `name: HELM_EXPR_0_-controller-manager`;
//   - a block replaces the whole line of its placeholder, a mapping key or
//     a sequence item, with lines it writes at that line's indentation:
//     `{{- with .Values.nodeSelector }}` and what follows.
type templateFile struct {
	exprs  []string
	blocks []block
	text   strings.Builder
}

// block writes the lines of a block at indent, the indentation of the line
// of its placeholder (for a sequence item, of its dash).
type block func(indent int) []string

var (
	exprPlaceholder  = regexp.MustCompile(`HELM_EXPR_(\d+)_`)
	blockPlaceholder = regexp.MustCompile(`^( *)(?:- )?HELM_BLOCK_(\d+)_(?::.*)?$`)
	// braces escapes what config/ holds that Helm would take for template
	// actions: the alerts' {{ $labels.cluster }}, the dashboard's legends.
	braces = strings.NewReplacer("{{", `{{ "{{" }}`, "}}", `{{ "}}" }}`)
)

// expr returns the placeholder of a template expression.
func (t *templateFile) expr(expression string) string {
	t.exprs = append(t.exprs, expression)
	return fmt.Sprintf("HELM_EXPR_%d_", len(t.exprs)-1)
}

// block returns the placeholder of a block.
func (t *templateFile) block(b block) string {
	t.blocks = append(t.blocks, b)
	return fmt.Sprintf("HELM_BLOCK_%d_", len(t.blocks)-1)
}

// blockKey returns a mapping key and value that the block replaces.
func (t *templateFile) blockKey(b block) (*kyaml.Node, *kyaml.Node) {
	return str(t.block(b)), str("")
}

// blockItem returns a sequence item that the block replaces.
func (t *templateFile) blockItem(b block) *kyaml.Node {
	return str(t.block(b))
}

// raw appends template text as it is.
func (t *templateFile) raw(text string) {
	t.text.WriteString(text)
}

// document appends a YAML document of the file, with its placeholders
// replaced. A document after another is separated from it.
func (t *templateFile) document(node *kyaml.RNode) error {
	text, err := node.String()
	if err != nil {
		return err
	}
	text = braces.Replace(text)
	var lines []string
	for line := range strings.SplitSeq(strings.TrimSuffix(text, "\n"), "\n") {
		match := blockPlaceholder.FindStringSubmatch(line)
		if match == nil {
			lines = append(lines, line)
			continue
		}
		index, _ := strconv.Atoi(match[2])
		lines = append(lines, t.blocks[index](len(match[1]))...)
	}
	text = strings.Join(lines, "\n") + "\n"
	text = exprPlaceholder.ReplaceAllStringFunc(text, func(placeholder string) string {
		index, _ := strconv.Atoi(exprPlaceholder.FindStringSubmatch(placeholder)[1])
		return t.exprs[index]
	})
	if strings.Contains(text, "HELM_BLOCK_") {
		at := strings.Index(text, "HELM_BLOCK_")
		return fmt.Errorf("a block placeholder of %s %s is not alone on its line: %s", node.GetKind(), node.GetName(), text[max(0, at-80):at+20])
	}
	t.text.WriteString(text)
	return nil
}

// separator starts the next document.
func (t *templateFile) separator() {
	t.text.WriteString("---\n")
}

// lines indents each line by indent spaces.
func lines(indent int, text ...string) []string {
	out := make([]string, len(text))
	for i, line := range text {
		out[i] = strings.Repeat(" ", indent) + line
	}
	return out
}

// optionalField is a block that writes key: with the YAML of a value when
// the value is set: `{{- with .Values.nodeSelector }}`.
func optionalField(key, value string) block {
	return func(indent int) []string {
		return lines(indent,
			"{{- with "+value+" }}",
			key+":",
			fmt.Sprintf("  {{- toYaml . | nindent %d }}", indent+2),
			"{{- end }}")
	}
}

// mergedEntries is a block, in a mapping, that adds the YAML of a map value
// (labels, annotations) to the mapping's entries.
func mergedEntries(value string) block {
	return func(indent int) []string {
		return lines(indent,
			"{{- with "+value+" }}",
			fmt.Sprintf("{{- toYaml . | nindent %d }}", indent),
			"{{- end }}")
	}
}

// included is a block, in a mapping, that adds the entries a named
// template of _helpers.tpl writes.
func included(name string) block {
	return func(indent int) []string {
		return lines(indent, fmt.Sprintf(`{{- include %q . | nindent %d }}`, name, indent))
	}
}

// fixed is a block of lines written as they are, at its indentation.
func fixed(text ...string) block {
	return func(indent int) []string { return lines(indent, text...) }
}

// str is a plain string scalar.
func str(value string) *kyaml.Node {
	return &kyaml.Node{Kind: kyaml.ScalarNode, Tag: kyaml.NodeTagString, Value: value}
}

// get returns the value at path in nested mappings, or nil.
func get(node *kyaml.Node, path ...string) *kyaml.Node {
	for _, key := range path {
		if node == nil || node.Kind != kyaml.MappingNode {
			return nil
		}
		var next *kyaml.Node
		for i := 0; i+1 < len(node.Content); i += 2 {
			if node.Content[i].Value == key {
				next = node.Content[i+1]
				break
			}
		}
		node = next
	}
	return node
}

// set sets key to value in a mapping, where key is, or at the end.
func set(mapping *kyaml.Node, key string, value *kyaml.Node) {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if mapping.Content[i].Value == key {
			mapping.Content[i+1] = value
			return
		}
	}
	mapping.Content = append(mapping.Content, str(key), value)
}

// replaceEntry replaces the entry of key in a mapping, where it is, with
// another key and value (a block's placeholder).
func replaceEntry(mapping *kyaml.Node, key string, newKey, value *kyaml.Node) bool {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if mapping.Content[i].Value == key {
			newKey.HeadComment = mapping.Content[i].HeadComment
			mapping.Content[i], mapping.Content[i+1] = newKey, value
			return true
		}
	}
	return false
}

// insertAfter adds key and value to a mapping after the entry of after.
func insertAfter(mapping *kyaml.Node, after string, key, value *kyaml.Node) {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if mapping.Content[i].Value == after {
			mapping.Content = append(mapping.Content[:i+2], append([]*kyaml.Node{key, value}, mapping.Content[i+2:]...)...)
			return
		}
	}
	mapping.Content = append(mapping.Content, key, value)
}

// remove removes key from a mapping.
func remove(mapping *kyaml.Node, key string) {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if mapping.Content[i].Value == key {
			mapping.Content = append(mapping.Content[:i], mapping.Content[i+2:]...)
			return
		}
	}
}

// mapping returns the mapping at key of parent, created when missing.
func mapping(parent *kyaml.Node, key string) *kyaml.Node {
	if node := get(parent, key); node != nil {
		return node
	}
	node := &kyaml.Node{Kind: kyaml.MappingNode, Tag: kyaml.NodeTagMap}
	set(parent, key, node)
	return node
}

// scalars calls visit with every scalar of node, keys of mappings apart.
func scalars(node *kyaml.Node, visit func(*kyaml.Node) error) error {
	switch node.Kind {
	case kyaml.ScalarNode:
		return visit(node)
	case kyaml.MappingNode:
		for i := 1; i < len(node.Content); i += 2 {
			if err := scalars(node.Content[i], visit); err != nil {
				return err
			}
		}
	case kyaml.SequenceNode, kyaml.DocumentNode:
		for _, child := range node.Content {
			if err := scalars(child, visit); err != nil {
				return err
			}
		}
	}
	return nil
}
