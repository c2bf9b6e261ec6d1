package main

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// ProductPackages are the packages of the manager and the kubectl plugin,
// whose names the reference lists; the end-to-end suites, hack/ and the
// test libraries (packages named *test) are not the product.
var ProductPackages = []string{".", "./api/...", "./autoscaler/...", "./clusterapi/...", "./cmd/...",
	"./internal/...", "./scalable/...", "./template/..."}

const module = "github.com/capi-autoscaler/capi-autoscaler"

// A Name is a string constant the product declares or uses, as a key of
// annotations, labels, taints or finalizers, an event reason, a condition
// type or reason, or a reason a node is kept.
type Name struct {
	Value string
	// Consts are the constants with that value, as package.Identifier.
	Consts []string
	// Doc is the doc comment of the first constant the product declares,
	// or, for one of another module, the module's name.
	Doc string
	// Kind groups keys: annotation, label, taint, finalizer, condition or
	// key (the identifier says none of those).
	Kind string
	// EventType is Normal or Warning for event reasons, when a call says.
	EventType string
	// Where are the product packages that declare or use it.
	Where []string
}

// Names are what the code holds, by reference section.
type Names struct {
	Keys             map[string]*Name
	EventReasons     map[string]*Name
	ConditionTypes   map[string]*Name
	ConditionReasons map[string]*Name
	NodeReasons      map[string]*Name
	// KeyLiterals are the keys the code spells as string literals, not
	// constants, at file:line: the reference cannot name nor describe
	// them, so none may be.
	KeyLiterals []string
}

// qualifiedName is a prefixed key such as
// cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size.
var qualifiedName = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z]{2,}/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// reasonValue is an event or condition reason: one CamelCase word.
var reasonValue = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// keyPrefix is the prefix of keys such as startup-taint.cluster-autoscaler.kubernetes.io/.
var keyPrefix = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z]{2,}/$`)

// apiVersion is a group/version such as autoscaling.x-k8s.io/v1beta1: not a key.
var apiVersion = regexp.MustCompile(`/v[0-9]+((alpha|beta)[0-9]+)?$`)

// LoadNames type-checks the product packages under root and collects their names.
func LoadNames(root string) (*Names, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	cfg := &packages.Config{
		Dir:  root,
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
	}
	pkgs, err := packages.Load(cfg, ProductPackages...)
	if err != nil {
		return nil, err
	}
	var errs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading the product's packages: %s", strings.Join(errs, "; "))
	}
	n := &Names{Keys: map[string]*Name{}, EventReasons: map[string]*Name{}, ConditionTypes: map[string]*Name{},
		ConditionReasons: map[string]*Name{}, NodeReasons: map[string]*Name{}}
	docs := map[types.Object]string{}
	for _, p := range pkgs {
		maps.Copy(docs, constDocs(p))
	}
	for _, p := range pkgs {
		if !isTestLibrary(p.PkgPath) {
			collector{names: n, pkg: p, docs: docs, root: root}.collect()
		}
	}
	return n, nil
}

func isTestLibrary(path string) bool {
	return strings.HasSuffix(path, "test")
}

// constDocs are the doc comments of the package's constants, by object:
// a constant's own, else its declaration group's.
func constDocs(p *packages.Package) map[types.Object]string {
	docs := map[types.Object]string{}
	for _, file := range p.Syntax {
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				doc := vs.Doc
				if doc == nil {
					doc = vs.Comment
				}
				if doc == nil {
					// The group's comment speaks for the constants
					// without one of their own.
					doc = gen.Doc
				}
				for _, id := range vs.Names {
					if obj := p.TypesInfo.Defs[id]; obj != nil && doc != nil {
						docs[obj] = oneParagraph(doc.Text())
					}
				}
			}
		}
	}
	return docs
}

func oneParagraph(text string) string {
	text, _, _ = strings.Cut(strings.TrimSpace(text), "\n\n")
	return strings.Join(strings.Fields(text), " ")
}

type collector struct {
	names *Names
	pkg   *packages.Package
	docs  map[types.Object]string
	// root is the repository's, which KeyLiterals' files are relative to.
	root string
}

func (c collector) collect() {
	info := c.pkg.TypesInfo
	// Constants the package declares.
	for id, obj := range info.Defs {
		if k, ok := obj.(*types.Const); ok && id.Obj != nil && !isTestFile(c.pkg.Fset, id.Pos()) {
			c.constant(k)
		}
	}
	// Constants it uses, from any package, and the reasons of its calls
	// and literals.
	for _, file := range c.pkg.Syntax {
		if isTestFile(c.pkg.Fset, file.Pos()) {
			continue
		}
		constValues := constLiterals(file)
		ast.Inspect(file, func(node ast.Node) bool {
			switch node := node.(type) {
			case *ast.BasicLit:
				if !constValues[node] {
					c.keyLiteral(node)
				}
			case *ast.Ident:
				if k, ok := info.Uses[node].(*types.Const); ok && k.Pkg() != nil && k.Pkg() != c.pkg.Types {
					c.key(k)
				}
			case *ast.CallExpr:
				c.call(node)
			case *ast.CompositeLit:
				c.literal(node)
			}
			return true
		})
	}
}

func isTestFile(fset *token.FileSet, pos token.Pos) bool {
	return strings.HasSuffix(fset.Position(pos).Filename, "_test.go")
}

// constant sorts a constant the package declares.
func (c collector) constant(k *types.Const) {
	value, ok := stringValue(k.Val())
	if !ok {
		return
	}
	c.key(k)
	name := k.Name()
	switch {
	case strings.HasPrefix(name, "Event") && reasonValue.MatchString(value):
		c.add(c.names.EventReasons, value, k, "")
	case c.pkg.PkgPath == module+"/api/v1alpha1" && strings.HasSuffix(name, "Condition"):
		c.add(c.names.ConditionTypes, value, k, "")
	case c.pkg.PkgPath == module+"/api/v1alpha1" && strings.HasSuffix(name, "Reason"):
		c.add(c.names.ConditionReasons, value, k, "")
	}
	if named, ok := k.Type().(*types.Named); ok && named.Obj().Pkg() == c.pkg.Types && c.pkg.Name == "scaledown" &&
		(named.Obj().Name() == "Reason" || named.Obj().Name() == "BlockingReason") {
		c.add(c.names.NodeReasons, value, k, "")
	}
}

// key records a constant that holds an annotation, label, taint or
// finalizer key or prefix: a prefixed name that is not an API version, or
// a constant of the product named for a taint (ToBeDeletedTaint).
func (c collector) key(k *types.Const) {
	value, ok := stringValue(k.Val())
	if !ok {
		return
	}
	if named, ok := k.Type().(*types.Named); ok && named.Obj().Name() != "string" {
		// A resource name, a taint effect, a condition type...: not a key.
		return
	}
	kind := keyKind(k.Name())
	qualified := qualifiedName.MatchString(value) && !apiVersion.MatchString(value) || keyPrefix.MatchString(value)
	namedTaint := strings.HasPrefix(k.Pkg().Path(), module) && strings.HasSuffix(k.Name(), "Taint") && reasonValue.MatchString(value)
	if !qualified && !namedTaint {
		return
	}
	if kind == "condition" {
		c.add(c.names.ConditionTypes, value, k, "")
		return
	}
	c.add(c.names.Keys, value, k, "").Kind = kind
}

// constLiterals are the literals of the file's constant declarations,
// whose values are collected as the constants.
func constLiterals(file *ast.File) map[*ast.BasicLit]bool {
	literals := map[*ast.BasicLit]bool{}
	ast.Inspect(file, func(node ast.Node) bool {
		if decl, ok := node.(*ast.GenDecl); ok && decl.Tok == token.CONST {
			ast.Inspect(decl, func(node ast.Node) bool {
				if lit, ok := node.(*ast.BasicLit); ok {
					literals[lit] = true
				}
				return true
			})
			return false
		}
		return true
	})
	return literals
}

// keyLiteral records a string literal that is a key: a prefixed name that
// is not an API version, of type string (a resource name such as
// nvidia.com/gpu has its own type).
func (c collector) keyLiteral(lit *ast.BasicLit) {
	tv, ok := c.pkg.TypesInfo.Types[lit]
	if !ok {
		return
	}
	if basic, ok := tv.Type.(*types.Basic); !ok || basic.Info()&types.IsString == 0 {
		return
	}
	value, ok := stringValue(tv.Value)
	if ok && (qualifiedName.MatchString(value) && !apiVersion.MatchString(value) || keyPrefix.MatchString(value)) {
		position := c.pkg.Fset.Position(lit.Pos())
		file, err := filepath.Rel(c.root, position.Filename)
		if err != nil {
			file = position.Filename
		}
		c.names.KeyLiterals = append(c.names.KeyLiterals, fmt.Sprintf("%s:%d: %q", file, position.Line, value))
	}
}

func keyKind(identifier string) string {
	for _, kind := range []string{"Annotation", "Label", "Taint", "Finalizer", "Condition"} {
		if strings.Contains(identifier, kind) {
			return strings.ToLower(kind)
		}
	}
	return "key"
}

// call records the reason of an event a call records: a constant passed
// as the parameter named reason of a function with an eventtype (or
// eventType) parameter.
func (c collector) call(call *ast.CallExpr) {
	info := c.pkg.TypesInfo
	sig, ok := info.TypeOf(call.Fun).(*types.Signature)
	if !ok {
		return
	}
	reason, eventType := -1, -1
	for i := range sig.Params().Len() {
		switch strings.ToLower(sig.Params().At(i).Name()) {
		case "reason":
			reason = i
		case "eventtype":
			eventType = i
		}
	}
	if reason < 0 || eventType < 0 || reason >= len(call.Args) {
		return
	}
	value, ok := stringValue(info.Types[call.Args[reason]].Value)
	if !ok {
		return
	}
	typ, _ := stringValue(info.Types[call.Args[eventType]].Value)
	c.add(c.names.EventReasons, value, constOf(info, call.Args[reason]), typ)
}

// literal records the constant reasons of node group problems, which are
// Warning events on the group, and the reasons of conditions.
func (c collector) literal(lit *ast.CompositeLit) {
	info := c.pkg.TypesInfo
	named, ok := types.Unalias(deref(info.TypeOf(lit))).(*types.Named)
	if !ok {
		return
	}
	typeName := named.Obj().Name()
	for _, elt := range lit.Elts {
		kv, ok := elt.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		field, ok := kv.Key.(*ast.Ident)
		if !ok {
			continue
		}
		value, ok := stringValue(info.Types[kv.Value].Value)
		if !ok {
			continue
		}
		switch {
		case typeName == "Problem" && field.Name == "Reason":
			c.add(c.names.EventReasons, value, constOf(info, kv.Value), "Warning")
		case typeName == "Condition" && named.Obj().Pkg().Path() == "k8s.io/apimachinery/pkg/apis/meta/v1" && field.Name == "Reason":
			c.add(c.names.ConditionReasons, value, constOf(info, kv.Value), "")
		case typeName == "Condition" && named.Obj().Pkg().Path() == "k8s.io/apimachinery/pkg/apis/meta/v1" && field.Name == "Type":
			c.add(c.names.ConditionTypes, value, constOf(info, kv.Value), "")
		}
	}
}

func deref(t types.Type) types.Type {
	if p, ok := t.(*types.Pointer); ok {
		return p.Elem()
	}
	return t
}

// constOf is the constant an expression names, if it names one.
func constOf(info *types.Info, expr ast.Expr) *types.Const {
	switch e := expr.(type) {
	case *ast.Ident:
		k, _ := info.Uses[e].(*types.Const)
		return k
	case *ast.SelectorExpr:
		k, _ := info.Uses[e.Sel].(*types.Const)
		return k
	}
	return nil
}

func stringValue(v constant.Value) (string, bool) {
	if v == nil || v.Kind() != constant.String {
		return "", false
	}
	return constant.StringVal(v), true
}

// add records value in section, from the constant k (nil for a literal).
func (c collector) add(section map[string]*Name, value string, k *types.Const, eventType string) *Name {
	n := section[value]
	if n == nil {
		n = &Name{Value: value}
		section[value] = n
	}
	if k != nil {
		id := k.Pkg().Name() + "." + k.Name()
		if !slices.Contains(n.Consts, id) {
			n.Consts = append(n.Consts, id)
			slices.Sort(n.Consts)
		}
		// The product's own words win over where another module defines it.
		if doc := c.docOf(k); doc != "" && (n.Doc == "" || strings.HasPrefix(n.Doc, "Defined by") && !strings.HasPrefix(doc, "Defined by")) {
			n.Doc = doc
		}
	}
	if eventType != "" && !strings.Contains(n.EventType, eventType) {
		if n.EventType != "" {
			n.EventType += ", "
		}
		n.EventType += eventType
	}
	where := strings.TrimPrefix(strings.TrimPrefix(c.pkg.PkgPath, module), "/")
	if where == "" {
		where = "."
	}
	if !slices.Contains(n.Where, where) {
		n.Where = append(n.Where, where)
		slices.Sort(n.Where)
	}
	return n
}

// docOf is a product constant's doc comment, or where another module's is
// defined.
func (c collector) docOf(k *types.Const) string {
	if !strings.HasPrefix(k.Pkg().Path(), module) {
		return "Defined by " + k.Pkg().Path() + "."
	}
	if doc, ok := c.docs[k]; ok {
		return doc
	}
	return ""
}
