package postgres

import "testing"

func TestXid64(t *testing.T) {
	const epoch = int64(5) << 32
	cases := []struct{ xmin, top, want int64 }{
		{1000, epoch | 1000, epoch | 1000},                   // the top-level transaction itself
		{1005, epoch | 1000, epoch | 1005},                   // a subtransaction after it
		{3, epoch | 0xFFFFFFF0, (int64(6) << 32) | 3},        // a subtransaction that wrapped
		{0xFFFFFFF5, epoch | 0xFFFFFFF0, epoch | 0xFFFFFFF5}, // near the wrap, not past it
		{42, 42, 42}, // epoch 0
	}
	for _, c := range cases {
		if got := xid64(c.xmin, c.top); got != c.want {
			t.Errorf("xid64(%d, %d) = %d, want %d", c.xmin, c.top, got, c.want)
		}
	}
}
