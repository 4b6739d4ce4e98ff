package config

import (
	"slices"
	"strings"
	"testing"
)

// withListenID is the smallest configuration with listen { id = id }, id
// written as HCL.
func withListenID(id string) []byte {
	return []byte(strings.Replace(smallest, `address = "127.0.0.1:18087"`, `address = "127.0.0.1:18087"`+"\n  id = "+id, 1))
}

// listen { id } names the sidecar whose tokens throttled.grants keeps: a
// name as a host's or a pod's, from the file or env(); anything else is
// refused at the listen block's line, naming the field and the value. It
// takes effect only on restart.
func TestListenID(t *testing.T) {
	for hcl, want := range map[string]string{
		`"throttled-0"`:                      "throttled-0",
		`"sidecar_a.eu-west-1"`:              "sidecar_a.eu-west-1",
		`env("THROTTLED_ID")`:                "pod-7",
		`"` + strings.Repeat("a", 253) + `"`: strings.Repeat("a", 253),
	} {
		c, err := Parse("throttled.hcl", withListenID(hcl), func(k string) string {
			if k == "THROTTLED_ID" {
				return "pod-7"
			}
			return getenv(k)
		})
		if err != nil || c.SidecarID != want {
			t.Errorf("id = %s: %v, SidecarID %q; want %q", hcl, err, c.SidecarID, want)
		}
	}
	if c, err := Parse("throttled.hcl", []byte(smallest), getenv); err != nil || c.SidecarID != "" {
		t.Errorf("no id: %v, SidecarID %q; want none", err, c.SidecarID)
	}
	for hcl, says := range map[string]string{
		`""`:                                 "empty",
		`"two words"`:                        `character ' '`,
		`"-lead"`:                            "start and end with a letter or a digit",
		`"trail."`:                           "start and end with a letter or a digit",
		`"pod/7"`:                            `character '/'`,
		`"café"`:                             `character 'é'`,
		`"` + strings.Repeat("a", 254) + `"`: "254 characters; at most 253",
	} {
		_, err := Parse("throttled.hcl", withListenID(hcl), getenv)
		if err == nil || !strings.Contains(err.Error(), "config: throttled.hcl:8: listen: id = ") || !strings.Contains(err.Error(), says) {
			t.Errorf("id = %s: %v; want refused at throttled.hcl:8 saying %q", hcl, err, says)
		}
	}
	// A linter without the secrets takes an env() it cannot read.
	if _, err := parse("throttled.hcl", withListenID(`env("THROTTLED_ID")`), getenv, true); err != nil {
		t.Errorf("id from an unset variable, without secrets: %v", err)
	}
	a, _ := Parse("throttled.hcl", withListenID(`"throttled-0"`), getenv)
	b, _ := Parse("throttled.hcl", withListenID(`"throttled-1"`), getenv)
	if a == nil || b == nil || !slices.Contains(RestartOnly(a, b), "listen id") {
		t.Errorf("a changed id: RestartOnly says nothing of it")
	}
}
