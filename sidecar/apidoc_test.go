package sidecar

import (
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
	"testing"
)

var updateAPIDoc = flag.Bool("update-api-doc", false, "rewrite docs/API.md from the route table and sidecar/api")

// docs/API.md is derived from the route table and the wire types: a route
// or a field added, renamed or retyped changes it, and this test fails
// until it is regenerated (go test ./sidecar -run TestAPIDoc -update-api-doc).
func TestAPIDocIsTrue(t *testing.T) {
	got, err := apiDoc("api/api.go")
	if err != nil {
		t.Fatal(err)
	}
	const path = "../docs/API.md"
	if *updateAPIDoc {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Fatalf("%s is not what the route table and sidecar/api say; regenerate it: go test ./sidecar -run TestAPIDoc -update-api-doc", path)
	}
}

// The generated description names every route and every wire type, so it
// cannot pass by saying nothing.
func TestAPIDocCoversEveryRouteAndType(t *testing.T) {
	got, err := apiDoc("api/api.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if !strings.Contains(got, "`"+r.Pattern+"`") {
			t.Errorf("API.md lacks route %s", r.Pattern)
		}
		for _, ty := range []reflect.Type{r.in, r.out} {
			for ty != nil && (ty.Kind() == reflect.Slice || ty.Kind() == reflect.Pointer) {
				ty = ty.Elem()
			}
			if ty != nil && !strings.Contains(got, "### "+ty.Name()+"\n") {
				t.Errorf("API.md lacks type %s of %s", ty.Name(), r.Pattern)
			}
		}
	}
}

// apiDoc renders docs/API.md: the routes, then each wire type with its
// doc comment and fields, from the source at path.
func apiDoc(path string) (string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		return "", err
	}
	pkg, err := doc.NewFromFiles(fset, []*ast.File{f}, "github.com/throttled/throttled/sidecar/api")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("# HTTP API\n\n")
	b.WriteString("Generated from the route table (`sidecar/routes.go`) and the wire types (`sidecar/api`) by\n")
	b.WriteString("`go test ./sidecar -run TestAPIDoc -update-api-doc`; a test fails when this file differs from them.\n")
	b.WriteString("Do not edit it by hand. Every refusal and failure answers [Error](#error) with a status code that says\n")
	b.WriteString("which: 400 a bad request (what and where), 401/403 authentication or scope, 404 unknown, 409 a conflict,\n")
	b.WriteString("410 an expired token, 429 throttled, 503 shed or a write the database cannot take for now, as in a\n")
	b.WriteString("failover's window (with `Retry-After`: retry). Request bodies are strict: an unknown, repeated or\n")
	b.WriteString("case-variant key is refused.\n\n")
	b.WriteString("## Routes\n\n| route | scope | body | answer | what it does |\n|---|---|---|---|---|\n")
	for _, r := range routes {
		scope := string(r.Scope)
		if scope == "" {
			scope = "none"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.Pattern, scope, typeLink(r.in), typeLink(r.out), r.doc)
	}
	b.WriteString("\n## Types\n")
	for _, ty := range pkg.Types {
		fmt.Fprintf(&b, "\n### %s\n\n%s\n", ty.Name, oneParagraph(ty.Doc))
		spec := ty.Decl.Specs[0].(*ast.TypeSpec)
		st, ok := spec.Type.(*ast.StructType)
		if !ok {
			continue
		}
		b.WriteString("\n| key | type | |\n|---|---|---|\n")
		for _, field := range st.Fields.List {
			desc := oneParagraph(field.Doc.Text())
			if len(field.Names) == 0 { // embedded
				name := strings.TrimPrefix(exprString(field.Type), "*")
				fmt.Fprintf(&b, "| *(the keys of [%s](#%s))* | | %s |\n", name, strings.ToLower(name), desc)
				continue
			}
			key, omit := jsonKey(field)
			if key == "-" {
				continue
			}
			if omit {
				desc = strings.TrimSpace(desc + " Omitted when empty.")
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", key, jsonType(field.Type), desc)
		}
	}
	return b.String(), nil
}

func typeLink(t reflect.Type) string {
	if t == nil {
		return "–"
	}
	prefix := ""
	for t.Kind() == reflect.Slice {
		prefix += "array of "
		t = t.Elem()
	}
	return fmt.Sprintf("%s[%s](#%s)", prefix, t.Name(), strings.ToLower(t.Name()))
}

// jsonKey is a field's JSON key and whether it is omitted when empty.
func jsonKey(f *ast.Field) (string, bool) {
	if f.Tag == nil {
		return f.Names[0].Name, false
	}
	tag := reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" {
		name = f.Names[0].Name
	}
	return name, strings.Contains(opts, "omitempty")
}

func jsonType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		switch e.Name {
		case "string":
			return "string"
		case "bool":
			return "boolean"
		case "int", "int64":
			return "integer"
		case "float64":
			return "number"
		}
		return fmt.Sprintf("[%s](#%s)", e.Name, strings.ToLower(e.Name))
	case *ast.StarExpr:
		return jsonType(e.X) + " or null"
	case *ast.ArrayType:
		return "array of " + jsonType(e.Elt)
	case *ast.MapType:
		return "object of " + jsonType(e.Value)
	case *ast.SelectorExpr:
		switch exprString(e) {
		case "time.Time":
			return "string (RFC 3339 time)"
		case "json.RawMessage":
			return "object"
		}
	}
	return exprString(e)
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return fmt.Sprintf("%T", e)
}

// oneParagraph joins a doc comment's lines into one line of markdown.
func oneParagraph(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
