package ws

import (
	"bytes"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordConn is a net.Conn that records each write it is given.
type recordConn struct {
	net.Conn
	writes [][]byte
}

func (r *recordConn) Write(p []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

// TestCorkConn: corked writes go out together and in order, a write that
// would pass the bound flushes first, and an uncorked connection holds no
// buffer.
func TestCorkConn(t *testing.T) {
	big := bytes.Repeat([]byte("x"), maxCork)
	for _, tt := range []struct {
		name   string
		writes [][]byte
		want   []string // the underlying writes, in order
	}{
		{"collected", [][]byte{[]byte("a"), []byte("bc")}, []string{"abc"}},
		{"bound reached", [][]byte{[]byte("a"), big[:maxCork-1], []byte("bc")}, []string{"a" + string(big[:maxCork-1]), "bc"}},
		{"exactly the bound", [][]byte{big}, []string{string(big)}},
		{"larger than the bound", [][]byte{[]byte("a"), append(big, 'y')}, []string{"a", string(big) + "y"}},
		{"nothing", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := &recordConn{}
			c := &corkConn{Conn: rc}
			c.cork()
			for _, w := range tt.writes {
				n, err := c.Write(w)
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			require.NoError(t, c.uncork())
			require.Nil(t, c.buf, "an uncorked connection holds no buffer")
			got := make([]string, 0, len(rc.writes))
			for _, w := range rc.writes {
				got = append(got, string(w))
			}
			require.Equal(t, len(tt.want), len(got))
			for i := range tt.want {
				require.Equal(t, tt.want[i], got[i], "write %d", i)
			}
			// Uncorked, every write goes straight through.
			_, err := c.Write([]byte("z"))
			require.NoError(t, err)
			require.Equal(t, "z", string(rc.writes[len(rc.writes)-1]))
			require.Nil(t, c.buf)
		})
	}
}
