package config

import (
	"reflect"
	"slices"

	"github.com/throttled/throttled/signals"
)

// RestartOnly names, as the file does, the settings that differ between
// cur and next and take effect only when throttled restarts: the fields of
// [Config], and of the blocks it holds, tagged `restart:"name"`. A reload
// applies every other setting. The list is derived from the type, so a new
// restart-only field is refused on reload as soon as it is tagged.
func RestartOnly(cur, next *Config) []string {
	var out []string
	diff(reflect.ValueOf(*cur), reflect.ValueOf(*next), &out)
	return out
}

func diff(a, b reflect.Value, out *[]string) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if name, ok := f.Tag.Lookup("restart"); ok {
			if !reflect.DeepEqual(restartForm(a.Field(i).Interface()), restartForm(b.Field(i).Interface())) && !slices.Contains(*out, name) {
				*out = append(*out, name)
			}
			continue
		}
		if f.IsExported() && f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == t.PkgPath() {
			diff(a.Field(i), b.Field(i), out)
		}
	}
}

// restartForm is what of a restart-only value a reload compares: the
// value, or what its restartForm method says (custom signals without the
// lines they were defined at, so moving a block in the file is no change).
func restartForm(v any) any {
	if f, ok := v.(interface{ restartForm() any }); ok {
		return f.restartForm()
	}
	return v
}

// CustomSignals are the custom signals of a file.
type CustomSignals []signals.CustomSignal

func (cs CustomSignals) restartForm() any {
	out := make([]signals.CustomSignal, len(cs))
	for i, c := range cs {
		c.Source = ""
		out[i] = c
	}
	return out
}
