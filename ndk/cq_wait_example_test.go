package ndk_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
)

// A server takes its completions with CQ.Wait: no polling loop, no notification callback,
// no channel of its own. Wait returns the client's message, and then, when the client
// disconnects, a *ndk.ConnectionEnded (the disconnect callback, if any, runs as well).
func ExampleCQ_Wait() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, server := openPair()
	defer client.a.Close(ctx)
	defer server.a.Close(ctx)

	inbox := make([]byte, 64)
	inboxMR, _ := server.pd.RegisterMR(inbox, ndk.MRAllowLocalWrite)
	_ = server.qp.Receive("inbox", []ndk.SGE{inboxMR.SGE(inbox)})

	accepted := make(chan error, 1)
	l, _ := server.a.NewListener(func(c *ndk.Connector) {
		go func() { accepted <- c.Accept(ctx, server.qp, 0, 0, nil, nil) }()
	})
	_ = l.Listen(netip.AddrPortFrom(netip.Addr{}, 1))
	conn, _ := client.a.NewConnector()
	if err := conn.Connect(ctx, client.qp, netip.AddrPortFrom(server.a.LocalAddr().Addr(), 1), 0, 0, nil); err != nil {
		panic(err)
	}
	if err := conn.CompleteConnect(ctx, nil); err != nil {
		panic(err)
	}
	if err := <-accepted; err != nil {
		panic(err)
	}

	// The client sends, waits for its Send to complete, and disconnects.
	go func() {
		msg := []byte("hello")
		mr, _ := client.pd.RegisterMR(msg, 0)
		_ = client.qp.Send("hello", []ndk.SGE{mr.SGE(msg)}, 0)
		var r [1]ndk.Result
		if _, err := client.cq.Wait(ctx, r[:]); err == nil {
			_ = conn.Disconnect(ctx)
		}
	}()

	var r [4]ndk.ResultEx
	for {
		n, err := server.cq.WaitEx(ctx, r[:])
		var ended *ndk.ConnectionEnded
		switch {
		case errors.As(err, &ended):
			fmt.Println("connection ended:", ended.Status.Name(), ended.QP == server.qp)
			return
		case err != nil:
			fmt.Println("wait:", err)
			return
		}
		for _, res := range r[:n] {
			fmt.Println(res.Type, res.Status.Name(), string(inbox[:res.BytesTransferred]))
		}
	}
	// Output:
	// Receive STATUS_SUCCESS hello
	// connection ended: STATUS_REMOTE_DISCONNECT true
}
