package config

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// Changing any restart-only field, found from the tags, is named; changing
// what a reload applies is not.
func TestRestartOnlyIsDerivedFromTheTags(t *testing.T) {
	base := Config{Listen: "127.0.0.1:8080", MaxConcurrent: 64, PrimaryDSN: "host=a", Cores: 8,
		ReplicaDSNs: map[string]string{"r1": "host=r1"}, HoldTTL: hold.TTLPolicy{Default: time.Hour, Max: 24 * time.Hour}, Cluster: "orders",
		Jobs: []Job{{Name: "purge", Weight: 1}}}

	reloadable := base
	reloadable.Jobs = []Job{{Name: "purge", Weight: 3}, {Name: "archive", Weight: 1}}
	reloadable.MaxBudget, reloadable.QuietPeriod, reloadable.OpenReads = 40, time.Minute, true
	reloadable.Replicas = map[string]throttle.ReplicaPolicy{"r1": throttle.ReplicaRequired}
	reloadable.Tokens = []Token{{Name: "ops", Secret: "0123456789abcdef", Scopes: []Scope{ScopePause}}}
	reloadable.Grafana.HoldTTL = 2 * time.Hour
	moved := base
	moved.Custom = CustomSignals{{Name: "q", Query: "SELECT 1", Source: "a.hcl:3"}}
	reloadable.Custom = CustomSignals{{Name: "q", Query: "SELECT 1", Source: "a.hcl:9"}}
	if got := RestartOnly(&moved, &reloadable); len(got) != 0 {
		t.Fatalf("reloadable changes named restart-only: %v", got)
	}

	// Every tagged field, at any depth, once changed, is named by its tag.
	var walk func(v reflect.Value, path string)
	n := 0
	walk = func(v reflect.Value, path string) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if name, ok := f.Tag.Lookup("restart"); ok {
				n++
				next := base
				field := reflect.ValueOf(&next).Elem()
				for _, idx := range append(indexPath(path), i) {
					field = field.Field(idx)
				}
				// A struct changes by its first field, at any depth
				// (hold.TTLPolicy, PrometheusSignals).
				for field.Kind() == reflect.Struct {
					field = field.Field(0)
				}
				switch field.Kind() {
				case reflect.String:
					field.SetString(field.String() + "x")
				case reflect.Float64:
					field.SetFloat(field.Float() + 1)
				case reflect.Int, reflect.Int64: // a time.Duration too
					field.SetInt(field.Int() + 1)
				case reflect.Bool:
					field.SetBool(!field.Bool())
				case reflect.Map:
					field.Set(reflect.ValueOf(map[string]string{"r2": "host=r2"}))
				case reflect.Slice:
					field.Set(reflect.Append(field, reflect.New(field.Type().Elem()).Elem()))
				default:
					t.Fatalf("%s: kind %s not covered by the test", f.Name, field.Kind())
				}
				if got := RestartOnly(&base, &next); !slices.Equal(got, []string{name}) {
					t.Errorf("changing %s: RestartOnly = %v; want [%s]", f.Name, got, name)
				}
				continue
			}
			if f.Type.Kind() == reflect.Struct && f.IsExported() && f.Type.PkgPath() == v.Type().PkgPath() {
				walk(v.Field(i), path+string(rune('a'+i)))
			}
		}
	}
	walk(reflect.ValueOf(base), "")
	if n < 13 {
		t.Fatalf("found %d restart-only fields; want at least 13", n)
	}
}

// indexPath decodes walk's path of field indexes.
func indexPath(p string) []int {
	var out []int
	for _, r := range p {
		out = append(out, int(r-'a'))
	}
	return out
}
