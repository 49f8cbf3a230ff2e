// Package xsk is the AF_XDP socket layer of xdpndk's datapath: one socket bound to one
// interface queue, its four single-producer/single-consumer rings (fill, completion, RX, TX)
// mapped from the kernel, the UMEM registration (XDP_UMEM_REG) and the raw system calls
// (following the kernel's Documentation/networking/af_xdp.rst).
//
// It moves descriptors and nothing else: no framing (package xdp/frame), no frame
// accounting, no steering program, no next-hop resolution and no transport contract; those
// are package xdp's, which composes a Socket per queue into the transport's Link. It depends
// only on golang.org/x/sys/unix and the UMEM of package memreg. All of its unsafe code is in
// sys_unsafe_linux.go.
//
// A Socket's ring methods (Fill, Receive, Transmit, Complete, Kick) belong to one goroutine
// at a time and neither allocate nor block. AF_XDP exists only on Linux: elsewhere the
// types build (so that configuration code is portable) and NewSocket does not exist.
package xsk
