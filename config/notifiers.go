package config

import (
	"slices"
	"strings"

	"github.com/throttled/throttled/page"
)

// Notifier is a paging destination.
type Notifier struct {
	Kind   string // webhook, alertmanager or pagerduty
	URL    string
	Secret string
}

// buildNotifiers reads the notifier blocks.
func (c *Config) buildNotifiers(doc *file, v *validator) {
	for _, n := range doc.Notifiers {
		// Two notifiers of one kind may page two places; the same kind
		// and URL twice would page one place twice.
		if !v.first(n.Range, "notifier", n.Kind+" to "+shownURL(n.URL)) {
			continue
		}
		if !slices.Contains(page.Kinds, n.Kind) {
			v.bad(n.Range, "notifier %q: want %s", n.Kind, strings.Join(page.Kinds, ", "))
		}
		if !strings.HasPrefix(n.URL, "http://") && !strings.HasPrefix(n.URL, "https://") {
			v.bad(n.Range, "notifier %q: url = %q: want an http(s) URL", n.Kind, shownURL(n.URL))
		}
		c.Notifiers = append(c.Notifiers, Notifier{Kind: n.Kind, URL: n.URL, Secret: v.secret(n.Range, "secret", n.Secret, n.SecretFile)})
	}
}
