package config

import (
	"slices"

	"github.com/throttled/throttled/internal/textsafe"
	"github.com/throttled/throttled/throttle/hold"
)

// Scope is what a token may do.
type Scope string

// Token scopes: read everything; pause and resume; admin (reload); work
// (take and report tokens, for remote workers).
const (
	ScopeRead  Scope = "read"
	ScopePause Scope = "pause"
	ScopeAdmin Scope = "admin"
	ScopeWork  Scope = "work"
)

// Token is an API token. Secret is never logged.
type Token struct {
	Name   string
	Secret string
	Scopes []Scope
}

// Allows reports whether the token has scope s.
func (t Token) Allows(s Scope) bool { return slices.Contains(t.Scopes, s) }

// buildHolds reads the holds block: the default and maximum TTL, checked
// by the one rule for a hold's life (hold.TTLPolicy): an unset
// default_ttl is 1h or max_ttl if shorter, a set one over max_ttl is
// refused.
func (c *Config) buildHolds(doc *file, v *validator) {
	var p hold.TTLPolicy
	if h := doc.Holds; h != nil {
		p.Default = v.duration(h.Range, "default_ttl", h.DefaultTTL, 0)
		p.Max = v.duration(h.Range, "max_ttl", h.MaxTTL, 0)
		if ps := p.Problems("default_ttl", "max_ttl"); len(ps) > 0 {
			for _, e := range ps {
				v.bad(h.Range, "holds: %s", e)
			}
			p = hold.TTLPolicy{}
		}
	}
	c.HoldTTL = p.Filled()
}

// buildListen reads the listen block: address, TLS, open reads and the request cap.
func (c *Config) buildListen(doc *file, v *validator) {
	c.MaxConcurrent = 64
	if l := doc.Listen; l != nil {
		if p := listenProblem(l.Address); p != "" {
			v.bad(l.Range, "listen: address = %q: %s; want host:port, such as \"127.0.0.1:18087\"", l.Address, p)
		}
		c.Listen = l.Address
		if l.ID != nil {
			if _, unset := Unset(*l.ID); !unset {
				if p := sidecarIDProblem(*l.ID); p != "" {
					v.bad(l.Range, "listen: id = \"%s\": %s; want a name such as \"throttled-0\" (a StatefulSet pod's name) or env(\"THROTTLED_ID\")", textsafe.Line(*l.ID), p)
				}
			}
			c.SidecarID = *l.ID
		}
		if (l.TLSCert == nil) != (l.TLSKey == nil) {
			v.bad(l.Range, "listen: give both tls_cert and tls_key, or neither")
		}
		if l.TLSCert != nil {
			c.TLSCert, c.TLSKey = *l.TLSCert, *l.TLSKey
		}
		if l.OpenChecks != nil {
			c.OpenChecks = *l.OpenChecks
		}
		if l.OpenReads != nil {
			c.OpenReads = *l.OpenReads
		}
		if l.MaxRequest != nil {
			if *l.MaxRequest < 1 {
				v.bad(l.Range, "listen: max_concurrent_requests must be at least 1, got %d", *l.MaxRequest)
			}
			c.MaxConcurrent = *l.MaxRequest
		}
	}
}

// buildTokens reads the token blocks: one secret per token, known scopes.
func (c *Config) buildTokens(doc *file, v *validator) {
	secrets := map[string]string{} // secret → the token that has it
	for _, t := range doc.Tokens {
		if !v.first(t.Range, "token", t.Name) {
			continue
		}
		// A token's name is the actor of every hold it places
		// ("token:NAME"): a name a hold would refuse makes every one of
		// them fail.
		if p := textsafe.Problem(t.Name); p != "" {
			v.bad(t.Range, "token \"%s\": name has a %s; a token's name is one printable line", textsafe.Line(t.Name), p)
		}
		secret := v.secret(t.Range, "secret", t.Secret, t.SecretFile)
		if _, unset := Unset(secret); !unset && len(secret) < 16 {
			v.bad(t.Range, "token %q: the secret must be at least 16 characters (from env() or secret_file)", t.Name)
		}
		// One secret, one token: otherwise which scopes a request gets
		// would depend on the order of the blocks.
		if other, dup := secrets[secret]; dup && secret != "" {
			v.bad(t.Range, "token %q has the same secret as token %q; give each token its own", t.Name, other)
		}
		secrets[secret] = t.Name
		tok := Token{Name: t.Name, Secret: secret}
		for _, s := range t.Scopes {
			switch Scope(s) {
			case ScopeRead, ScopePause, ScopeAdmin, ScopeWork:
				tok.Scopes = append(tok.Scopes, Scope(s))
			default:
				v.bad(t.Range, "token %q: scope %q: want read, pause, admin or work", t.Name, s)
			}
		}
		c.Tokens = append(c.Tokens, tok)
	}
}

// Token returns the token whose secret is secret, comparing in constant
// time against every configured token.
func (c *Config) Token(secret string) (Token, bool) {
	return lookupToken(c.Tokens, secret)
}
