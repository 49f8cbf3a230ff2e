package xdp

import (
	"testing"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// TestQueryNetdev asks the kernel about a test bed veth: it does XDP (basic and redirect,
// what the steering program needs) and has no AF_XDP zero-copy (the bind falls back to copy
// mode: veth refuses XDP_ZEROCOPY with EOPNOTSUPP), so no zero-copy segment limit is
// reported.
func TestQueryNetdev(t *testing.T) {
	bed := testbed.NewT(t, testbed.Options{})
	var info NetdevInfo
	if err := bed.A.Do(func() (err error) { info, err = QueryNetdev(bed.A.IfIndex); return err }); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %+v", bed.A.Ifname, info)
	if info.XDPFeatures&(XDPActBasic|XDPActRedirect) != XDPActBasic|XDPActRedirect {
		t.Errorf("xdp features %#x lack basic and redirect", info.XDPFeatures)
	}
	if info.XDPFeatures&XDPActXSKZeroCopy != 0 {
		t.Errorf("xdp features %#x claim AF_XDP zero-copy on veth", info.XDPFeatures)
	}
	if info.ZCMaxSegs != 0 {
		t.Errorf("zero-copy segment limit %d reported for a device without zero-copy", info.ZCMaxSegs)
	}
	// An index no interface has: the kernel refuses the query.
	if err := bed.A.Do(func() error { _, err := QueryNetdev(1 << 30); return err }); err == nil {
		t.Error("query of a missing interface succeeded")
	}
}
