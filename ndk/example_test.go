package ndk_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport/simlink"
)

// endpoint is what each example side sets up: an adapter, a PD, one CQ and a QP.
type endpoint struct {
	a  *ndk.Adapter
	pd *ndk.PD
	cq *ndk.CQ
	qp *ndk.QP
}

func newEndpoint(a *ndk.Adapter) endpoint {
	pd, _ := a.NewPD()
	cq, _ := a.NewCQ(64, nil)
	qp, err := pd.NewQP(ndk.QPConfig{ReceiveCQ: cq, InitiatorCQ: cq})
	if err != nil {
		panic(err)
	}
	return endpoint{a: a, pd: pd, cq: cq, qp: qp}
}

// openPair opens two adapters on an in-memory link pair (ndk.Open would give one on an
// AF_XDP interface) with an endpoint on each.
func openPair() (client, server endpoint) {
	la, lb := simlink.Pair(simlink.Config{})
	ca, _ := ndk.OpenLink(la, ndk.DefaultOptions())
	sa, _ := ndk.OpenLink(lb, ndk.DefaultOptions())
	return newEndpoint(ca), newEndpoint(sa)
}

// connect connects client's QP to a listener on server's port 1 and returns when both
// QPs are connected.
func connect(ctx context.Context, client, server endpoint) {
	accepted := make(chan error, 1)
	l, _ := server.a.NewListener(func(c *ndk.Connector) {
		go func() { accepted <- c.Accept(ctx, server.qp, 4, 4, nil, nil) }()
	})
	_ = l.Listen(netip.AddrPortFrom(netip.Addr{}, 1))
	c, _ := client.a.NewConnector()
	if err := c.Connect(ctx, client.qp, netip.AddrPortFrom(server.a.LocalAddr().Addr(), 1), 4, 4, nil); err != nil {
		panic(err)
	}
	if err := c.CompleteConnect(ctx, nil); err != nil {
		panic(err)
	}
	if err := <-accepted; err != nil {
		panic(err)
	}
}

// wait polls cq until it has a result.
func wait(cq *ndk.CQ) ndk.ResultEx {
	var r [1]ndk.ResultEx
	for cq.GetResultsEx(r[:]) == 0 {
		time.Sleep(10 * time.Microsecond)
	}
	return r[0]
}

// Two adapters connect a QP each; the client sends a message into a receive the server
// posted.
func Example_sendReceive() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, server := openPair()
	defer client.a.Close(ctx)
	defer server.a.Close(ctx)

	inbox := make([]byte, 64)
	inboxMR, _ := server.pd.RegisterMR(inbox, ndk.MRAllowLocalWrite)
	_ = server.qp.Receive("inbox", []ndk.SGE{inboxMR.SGE(inbox)})

	connect(ctx, client, server)

	msg := []byte("hello over NDK")
	msgMR, _ := client.pd.RegisterMR(msg, ndk.MRAllowLocalRead)
	_ = client.qp.Send("hello", []ndk.SGE{msgMR.SGE(msg)}, 0)

	s := wait(client.cq)
	r := wait(server.cq)
	fmt.Println(s.Type, s.Status.Name(), s.RequestContext)
	fmt.Println(r.Type, r.Status.Name(), r.RequestContext, string(inbox[:r.BytesTransferred]))
	// Output:
	// Send STATUS_SUCCESS hello
	// Receive STATUS_SUCCESS inbox hello over NDK
}

// The server binds a memory window over part of a registered region and sends the client
// its address and token; the client writes into it with an RDMA Write. A Write one byte
// past the window fails with STATUS_ACCESS_VIOLATION and writes nothing.
func Example_writeToWindow() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, server := openPair()
	defer client.a.Close(ctx)
	defer server.a.Close(ctx)
	connect(ctx, client, server)

	// Server: a region with local write, and a remote-write window over bytes 100..163.
	region := make([]byte, 4096)
	mr, _ := server.pd.RegisterMR(region, ndk.MRAllowLocalWrite)
	mw, _ := server.pd.NewMW()
	if err := server.qp.Bind("bind", mr, mw, mr.VA()+100, 64, ndk.OpAllowRemoteWrite); err != nil {
		panic(err)
	}
	addr, token := mr.VA()+100, mw.RemoteToken() // valid as soon as Bind returns
	fmt.Println(wait(server.cq).Type)

	// Client: write 5 bytes 10 bytes into the window (an offset added to the address).
	data := []byte("xdpnd")
	dmr, _ := client.pd.RegisterMR(data, 0)
	_ = client.qp.Write("write", []ndk.SGE{dmr.SGE(data)}, addr+10, token, 0)
	fmt.Println(wait(client.cq).Status.Name(), string(region[110:115]))

	_ = client.qp.Write("past the end", []ndk.SGE{dmr.SGE(data)}, addr+60, token, 0)
	fmt.Println(wait(client.cq).Status.Name(), region[160] == 0)
	// Output:
	// Bind
	// STATUS_SUCCESS xdpnd
	// STATUS_ACCESS_VIOLATION true
}
