package sidecar_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The return allow-list is a path prefix on a segment boundary, and ".."
// segments cannot step out of it: the browser would follow the redirect
// to a page outside the allowed prefix.
func TestReturnURLDotSegmentsEscapeAllowList(t *testing.T) {
	base, dashboard, _ := confirmPage(t)
	u, _ := url.Parse(dashboard)
	escape := u.Scheme + "://" + u.Host + "/d/../admin/users"
	code, body, _ := uiDo(t, "GET", base+"/ui/pause?job=ui-job&return="+url.QueryEscape(escape), "alice", nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "dot segments") {
		t.Fatalf("return=%s (resolves to /admin/users, outside /d/): %d %s; want 400", escape, code, body)
	}
}
