package memreg

// The rights vocabulary: Access, the remote rights a token grants (shared with the
// transport, whose Access is this type), and the NDKPI flags that grant them.

// Access is a set of remote rights checked by Resolve and Acquire: remote read (RDMA Read
// by the peer) and remote write (RDMA Write). It is the transport's too: a
// transport.MemoryResolver is asked for these rights in this type.
type Access uint8

const (
	// AccessRemoteRead lets the peer read the memory (RDMA Read).
	AccessRemoteRead Access = 1 << iota
	// AccessRemoteWrite lets the peer write the memory (RDMA Write).
	AccessRemoteWrite
)

// MRFlags are the NDK_MR_FLAG_* values of NDKPI NdkRegisterMr.
type MRFlags uint32

const (
	// MRAllowLocalRead is NDK_MR_FLAG_ALLOW_LOCAL_READ (always granted; the value is 0).
	MRAllowLocalRead MRFlags = 0x0
	// MRAllowLocalWrite is NDK_MR_FLAG_ALLOW_LOCAL_WRITE.
	MRAllowLocalWrite MRFlags = 0x1
	// MRAllowRemoteRead is NDK_MR_FLAG_ALLOW_REMOTE_READ.
	MRAllowRemoteRead MRFlags = 0x2
	// MRAllowRemoteWrite is NDK_MR_FLAG_ALLOW_REMOTE_WRITE; it includes the local write bit.
	MRAllowRemoteWrite MRFlags = 0x5
	// MRRDMAReadSink is NDK_MR_FLAG_RDMA_READ_SINK. It is accepted and has no further effect:
	// every locally writable region may be an RDMA Read sink here.
	MRRDMAReadSink MRFlags = 0x8

	mrFlagsValid = MRAllowLocalWrite | MRAllowRemoteRead | MRAllowRemoteWrite | MRRDMAReadSink
)

// OpFlags are the NDK_OP_FLAG_* values of work requests (ndkpi.h) that Bind and
// FastRegister accept.
type OpFlags uint32

const (
	// OpSilentSuccess is NDK_OP_FLAG_SILENT_SUCCESS (accepted; completion policy is not the
	// registry's business).
	OpSilentSuccess OpFlags = 0x1
	// OpReadFence is NDK_OP_FLAG_READ_FENCE (accepted, ignored here).
	OpReadFence OpFlags = 0x2
	// OpAllowRemoteRead is NDK_OP_FLAG_ALLOW_REMOTE_READ.
	OpAllowRemoteRead OpFlags = 0x8
	// OpAllowLocalWrite is NDK_OP_FLAG_ALLOW_LOCAL_WRITE (FastRegister only).
	OpAllowLocalWrite OpFlags = 0x10
	// OpAllowRemoteWrite is NDK_OP_FLAG_ALLOW_REMOTE_WRITE; it includes the local write bit.
	OpAllowRemoteWrite OpFlags = 0x30
	// OpRDMAReadSink is NDK_OP_FLAG_RDMA_READ_SINK (FastRegister only; accepted).
	OpRDMAReadSink OpFlags = 0x80
	// OpDefer is NDK_OP_FLAG_DEFER (accepted, ignored here).
	OpDefer OpFlags = 0x200

	opRemoteWriteOnly = OpAllowRemoteWrite &^ OpAllowLocalWrite
	bindFlagsValid    = OpSilentSuccess | OpReadFence | OpAllowRemoteRead | OpAllowRemoteWrite | OpDefer
	frFlagsValid      = bindFlagsValid | OpAllowLocalWrite | OpRDMAReadSink
)

func mrAccess(f MRFlags) Access {
	var a Access
	if f&MRAllowRemoteRead != 0 {
		a |= AccessRemoteRead
	}
	if f&MRAllowRemoteWrite == MRAllowRemoteWrite {
		a |= AccessRemoteWrite
	}
	return a
}

func opAccess(f OpFlags) Access {
	var a Access
	if f&OpAllowRemoteRead != 0 {
		a |= AccessRemoteRead
	}
	if f&OpAllowRemoteWrite == OpAllowRemoteWrite {
		a |= AccessRemoteWrite
	}
	return a
}
