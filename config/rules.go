package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// ruleProblems says, in the file's words, why the controller refuses the
// rule r on the signal name. It only renders: the controller decides
// (checkController asks it first), and a refusal this does not recognise
// is shown in the controller's own words. The levels it quotes are the
// controller's defaults, read from the controller.
func ruleProblems(name signals.Name, r throttle.Rule) []string {
	if !takesRules(name) {
		var named []string
		for _, n := range signals.Names {
			if takesRules(n) {
				named = append(named, string(n))
			}
		}
		return []string{fmt.Sprintf("takes no rule, it only informs; rules may name %s", strings.Join(named, ", "))}
	}
	ctl, err := throttle.New(throttle.Config{})
	if err != nil {
		return nil
	}
	d := ctl.Config()
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	// connection_headroom is a free fraction of client slots: a level to
	// stay over, so its critical level lies under its target.
	headroom := name == signals.ConnectionHeadroom
	// foreground_latency is a multiple of the latency without jobs: its
	// pressure is the excess over 1 against the excess the target allows.
	latency := name == signals.ForegroundLatency
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch {
	case !(r.Target > 0) || !finite(r.Target):
		bad("target must be a positive number, got %v", r.Target)
	case headroom && r.Target >= 1:
		bad("target %v: connection_headroom is the free fraction of client slots; want a target under 1, such as 0.1", r.Target)
	case latency && r.Target <= 1:
		bad("target %v: foreground_latency is a multiple of the canary's latency without jobs; want a target above 1, such as 1.3", r.Target)
	}
	if r.Critical < 0 || !finite(r.Critical) {
		bad("critical must not be negative, got %v", r.Critical)
	}
	if len(out) > 0 || r.Critical == 0 {
		return out
	}
	switch {
	case !headroom && r.Critical <= r.Target:
		bad("target %v must be below critical %v", r.Target, r.Critical)
	case headroom && r.Critical >= r.Target:
		bad("critical %v must be below target %v: connection_headroom is a free fraction to stay over", r.Critical, r.Target)
	case latency && (r.Critical-1)/(r.Target-1) <= d.EmergencyPressure:
		bad("critical %v is too close to target %v: every job is cut at once at %v times the excess the target allows (%.4g), and that must come before critical; set critical above it",
			r.Critical, r.Target, d.EmergencyPressure, 1+d.EmergencyPressure*(r.Target-1))
	case !headroom && r.Critical/r.Target <= d.EmergencyPressure:
		bad("critical %v is too close to target %v: every job is cut at once at %v × target (%.4g), and that must come before critical; set critical above it",
			r.Critical, r.Target, d.EmergencyPressure, d.EmergencyPressure*r.Target)
	case headroom && r.Target/r.Critical <= d.EmergencyPressure:
		bad("critical %v is too close to target %v: every job is cut at once at target / %v (%.4g free), and that must come before critical; set critical under it",
			r.Critical, r.Target, d.EmergencyPressure, r.Target/d.EmergencyPressure)
	}
	if headroom && r.Critical/d.ResumeLevel >= 1 {
		bad("critical %v: after a critical pause work resumes only with critical / %v = %.4g of client slots free, more than every slot; set critical under %v",
			r.Critical, d.ResumeLevel, r.Critical/d.ResumeLevel, d.ResumeLevel)
	}
	return out
}

// takesRules reports whether the controller takes a rule on the signal
// name, by asking it: some signals only inform.
func takesRules(name signals.Name) bool {
	for _, target := range []float64{0.5, 1.5} { // a fraction, or a multiple (foreground_latency)
		if _, err := throttle.New(throttle.Config{Rules: map[signals.Name]throttle.Rule{name: {Target: target}}}); err == nil {
			return true
		}
	}
	return false
}

// listenProblem says what is wrong with a listen address, or "". The port
// is a number from 1 to 65535; the host is empty (every interface), an IP
// address or a DNS name.
func listenProblem(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if ae := (*net.AddrError)(nil); errors.As(err, &ae) {
		return ae.Err
	} else if err != nil {
		return err.Error()
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("port %q is not a number from 1 to 65535", port)
	}
	if host == "" {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if !dnsName(host) {
		return fmt.Sprintf("host %q is neither an IP address nor a DNS name", host)
	}
	return ""
}

// maxSidecarID bounds listen { id }: a DNS name's length.
const maxSidecarID = 253

// sidecarIDProblem says what is wrong with a sidecar's id, or "": 1 to
// 253 letters, digits, dots, hyphens and underscores, starting and ending
// with a letter or a digit, as a host's or a pod's name is.
func sidecarIDProblem(id string) string {
	switch {
	case id == "":
		return "empty (an env() of an empty variable?); leave id out to name the sidecar by its host and socket"
	case len(id) > maxSidecarID:
		return fmt.Sprintf("%d characters; at most %d", len(id), maxSidecarID)
	}
	alnum := func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' }
	for _, r := range id {
		if !alnum(r) && r != '.' && r != '-' && r != '_' {
			return fmt.Sprintf("character %q; only letters, digits, '.', '-' and '_'", r)
		}
	}
	if !alnum(rune(id[0])) || !alnum(rune(id[len(id)-1])) {
		return "it must start and end with a letter or a digit"
	}
	return ""
}

// dnsName reports whether s is a DNS name: dot-separated labels of
// letters, digits and inner hyphens, 63 characters each at most, 253 in
// all, the last not all digits.
func dnsName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, ch := range l {
			if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-') {
				return false
			}
		}
	}
	// An all-digit last label is a malformed IPv4 address, such as
	// 127.0.0.256, not a name.
	_, err := strconv.Atoi(labels[len(labels)-1])
	return err != nil
}
