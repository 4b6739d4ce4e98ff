package config

import (
	"strings"
	"testing"
)

// Two tokens sharing one secret would make the bearer ambiguous (a
// "read" secret reused for an "admin" token): the file is refused.
func TestDuplicateTokenSecretsRefused(t *testing.T) {
	src := strings.Replace(smallest, `env("THROTTLED_TOKEN_VIEWER")`, `env("THROTTLED_TOKEN_OPS")`, 1)
	// viewer (read only) now shares ops' (read, pause, admin) secret:
	// which token the secret means depends on declaration order.
	c, err := Parse("throttled.hcl", []byte(src), getenv)
	if err == nil {
		tok, ok := c.Token(env["THROTTLED_TOKEN_OPS"])
		t.Fatalf("two tokens with the same secret were accepted; the secret resolves to %q (ok=%v, scopes %v)", tok.Name, ok, tok.Scopes)
	}
}

// Even given such a Config, the lookup resolves an ambiguous secret to
// no token, not to whichever came last.
func TestAmbiguousSecretNotResolved(t *testing.T) {
	c := &Config{Tokens: []Token{
		{Name: "viewer", Secret: "shared-secret-0123456789", Scopes: []Scope{ScopeRead}},
		{Name: "ops", Secret: "shared-secret-0123456789", Scopes: []Scope{ScopeAdmin}},
	}}
	if tok, ok := c.Token("shared-secret-0123456789"); ok {
		t.Fatalf("an ambiguous secret resolved to %q with scopes %v", tok.Name, tok.Scopes)
	}
}
