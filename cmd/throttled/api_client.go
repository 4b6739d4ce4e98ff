package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/textsafe"
)

// apiError is a sidecar's answer other than 2xx.
type apiError struct {
	Method, Path string
	Status       int
	Message      string // the sidecar's error, if it gave one
}

func (e *apiError) Error() string {
	if e.Message != "" {
		// Another process's words, printed on one line as they are.
		return fmt.Sprintf("%s %s: %d: %s", e.Method, e.Path, e.Status, textsafe.Line(e.Message))
	}
	return fmt.Sprintf("%s %s: %d", e.Method, e.Path, e.Status)
}

// retryable says of err, a hold the cluster could not take for now (a
// failover's window: the database unreachable or no primary, or the
// sidecar's 503), that nothing was placed and the same command should be
// run again; other errors are returned as they are.
func retryable(err error) error {
	var ae *apiError
	if holds.Unavailable(err) || (errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable) {
		return fmt.Errorf("not placed: no primary could take it now (a failover?); run the same command again in a few seconds: %w", err)
	}
	return err
}

// apiCall sends one request to a sidecar, bounded by ctx, with the token
// from THROTTLED_TOKEN. It returns the body of a 2xx answer, or an
// *apiError carrying the status and the sidecar's message.
func apiCall(ctx context.Context, addr, token, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(addr, "/")+path, rd)
	if err != nil {
		return nil, usageError(fmt.Errorf("--addr %q: %w", addr, err))
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		return nil, &apiError{Method: method, Path: path, Status: resp.StatusCode, Message: e.Error}
	}
	return raw, nil
}
