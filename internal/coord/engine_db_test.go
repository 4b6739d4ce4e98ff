package coord_test

import (
	"testing"

	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// The tests of coordinated mode through the Client that wires it (package
// throttled, the module root), against the package's own throwaway pair.

func TestMain(m *testing.M) { pgtest.Main(m) }
