package bpf

// XDP actions, as returned by Program.Run (enum xdp_action in the kernel UAPI).
const (
	// XDPAborted means the program failed; the steering program never returns it.
	XDPAborted uint32 = 0
	// XDPDrop means the packet was dropped (fault injection only).
	XDPDrop uint32 = 1
	// XDPPass means the packet goes to the kernel network stack.
	XDPPass uint32 = 2
	// XDPTx means the packet is bounced out of the interface; never returned.
	XDPTx uint32 = 3
	// XDPRedirect means the packet goes to the AF_XDP socket of its RX queue.
	XDPRedirect uint32 = 4
)

// Counters are the program's verdict counts summed over all CPUs, since Load. Each packet
// the program sees increments exactly one of Redirected, Passed, NoSocket, Malformed and
// FaultDropped.
type Counters struct {
	// Redirected counts our packets handed to an AF_XDP socket (XDP_REDIRECT).
	Redirected uint64
	// Passed counts packets that are not ours (other protocols, ports, IP fragments),
	// passed to the kernel.
	Passed uint64
	// NoSocket counts our packets passed to the kernel because no socket is set for the
	// queue they arrived on.
	NoSocket uint64
	// Malformed counts packets with a truncated or invalid Ethernet, VLAN, IP or UDP
	// header, passed to the kernel and never steered.
	Malformed uint64
	// FaultDropped counts our packets dropped by fault injection (XDP_DROP).
	FaultDropped uint64
	// RedirectedBytes is the total frame length (Ethernet header to the end of the last
	// fragment) of the Redirected packets.
	RedirectedBytes uint64
}
