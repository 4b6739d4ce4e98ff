package config

import (
	"fmt"
	"os"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Block is one block of a configuration file, as written: its kind (the
// block's type, such as "prometheus_signal"), its labels, and where it
// is.
type Block struct {
	Kind   string
	Labels []string
	// At is the block's place, file:line.
	At string
}

// Blocks lists the top-level blocks of the file at path in the file's
// order, as written: read only, it validates nothing, so a command that
// honours some kinds of block and not others can refuse the others by
// their place. A file that is not HCL is an *InvalidError; one that is
// HCL but not a valid configuration is listed all the same ([Load] says
// what is wrong with it).
func Blocks(path string) ([]Block, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.Pos{Line: 1, Column: 1})
	if diags.HasErrors() {
		return nil, &InvalidError{diagError(diags)}
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return nil, nil
	}
	out := make([]Block, 0, len(body.Blocks))
	for _, b := range body.Blocks {
		r := b.DefRange()
		out = append(out, Block{Kind: b.Type, Labels: b.Labels, At: fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)})
	}
	return out, nil
}
