package sidecar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
)

// decode reads a request body into v strictly: one JSON value, no unknown
// fields, and no key twice or in another case (checkKeys).
func decode(r *http.Request, v any) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return fmt.Errorf("body: %w", err)
	}
	return decodeStrict(data, v, true)
}

// decodeStrict unmarshals data into v after checkKeys; known refuses
// fields v does not declare.
func decodeStrict(data []byte, v any, known bool) error {
	if err := checkKeys(data, reflect.TypeOf(v)); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if known {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if dec.More() {
		return errors.New("body: more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("body: trailing data")
	}
	return nil
}

// checkKeys refuses what encoding/json would quietly resolve: a key given
// twice (it keeps the last, so {"scope":"job:x","scope":"all"} would widen
// a pause), and a key that matches one of t's fields only when case is
// ignored ("SCOPE" for "scope"). Objects decoded into maps may not repeat
// a key either. The error names the key and where it is.
func checkKeys(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	err := walkKeys(dec, t, "")
	if err == nil || errors.Is(err, errSyntax) {
		return nil // syntax is the decoder's to report, with its offset
	}
	return err
}

var errSyntax = errors.New("syntax")

func walkKeys(dec *json.Decoder, t reflect.Type, at string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return errSyntax
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkKeys(dec, elem, at+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case '{':
		fields := map[string]field{} // by foldKey
		var elem reflect.Type
		isStruct := t != nil && t.Kind() == reflect.Struct
		if isStruct {
			fields = jsonFields(t)
		} else if t != nil && t.Kind() == reflect.Map {
			elem = t.Elem()
		}
		seen := map[string]string{} // by the key's case-folded form when decoding into a struct
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return errSyntax
			}
			key, _ := kt.(string)
			fold := key
			if isStruct {
				fold = foldKey(key)
			}
			where := at + "." + key
			if at == "" {
				where = key
			}
			if prev, dup := seen[fold]; dup {
				if prev == key {
					return fmt.Errorf("key %q appears twice%s", key, in(at))
				}
				return fmt.Errorf("keys %q and %q differ only in case%s", prev, key, in(at))
			}
			seen[fold] = key
			next := elem
			if isStruct {
				f, known := fields[fold]
				if known && f.name != key {
					return fmt.Errorf("key %q: did you mean %q? keys are case-sensitive", where, f.name)
				}
				next = f.typ // nil for an unknown key: the decoder decides
			}
			if err := walkKeys(dec, next, where); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return errSyntax
	}
	return nil
}

func in(at string) string {
	if at == "" {
		return ""
	}
	return " in " + at
}

type field struct {
	name string
	typ  reflect.Type
}

// foldKey is how encoding/json matches a key to a field, ignoring case
// the Unicode way: "ſcope" (long s) and "SCOPE" both match "scope".
func foldKey(s string) string { return strings.ToLower(strings.ToUpper(s)) }

// jsonFields are t's fields as encoding/json names them, by foldKey.
func jsonFields(t reflect.Type) map[string]field {
	out := map[string]field{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag := f.Tag.Get("json"); tag != "" {
			if tag == "-" {
				continue
			}
			if n, _, _ := strings.Cut(tag, ","); n != "" {
				name = n
			}
		}
		out[foldKey(name)] = field{name: name, typ: f.Type}
	}
	return out
}
