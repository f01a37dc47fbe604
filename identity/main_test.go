package identity_test

import (
	"testing"

	"pigeon/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
