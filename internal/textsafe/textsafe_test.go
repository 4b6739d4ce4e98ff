package textsafe

import "testing"

func TestLine(t *testing.T) {
	for in, want := range map[string]string{
		"deploy":                      "deploy",
		"café — 日本語 🚧":                "café — 日本語 🚧",
		`C:\tmp\n`:                    `C:\tmp\n`,
		"deploy\nh99  all  pause":     `deploy\nh99  all  pause`,
		"a\tb\rc":                     `a\tb\rc`,
		"\x1b[2K\x1b]0;title\a":       `\x1b[2K\x1b]0;title\a`,
		"del\x7f csi\u009b nel\u0085": `del\x7f csi\u009b nel\u0085`,
		"ls\u2028ps\u2029":            `ls\u2028ps\u2029`,
		"rlo\u202egnp lri\u2066x\u2069 zw\u200bsp": `rlo\u202egnp lri\u2066x\u2069 zw\u200bsp`,
		"bad\xff\xfe utf8":                         `bad\xff\xfe utf8`,
		"nul\x00":                                  `nul\x00`,
		"nbsp\u00a0ok":                             "nbsp\u00a0ok",
	} {
		if got := Line(in); got != want {
			t.Errorf("Line(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"ok":                                 "ok",
		"load high\non db1\r\n\tsee runbook": "load high on db1 see runbook",
		"\x1b[31mRED\x1b[0m":                 "[31mRED [0m",
		"rlo\u202egnp":                       "rlo gnp",
		"\n\n":                               "",
		// What PostgreSQL cannot store stays, for Storable to refuse.
		"lag\x00high\n": "lag\x00high",
		"bad\xff\nutf8": "bad\xff utf8",
	} {
		if got := OneLine(in); got != want {
			t.Errorf("OneLine(%q) = %q; want %q", in, got, want)
		}
	}
}
