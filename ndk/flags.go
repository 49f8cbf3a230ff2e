package ndk

import (
	"strconv"

	"github.com/xdpndk/xdpndk/memreg"
)

// OpFlags are the NDK_OP_FLAG_* values of work requests, with their NDK numbers (ndkpi.h).
// Each verb accepts the subset its NDKPI page lists; others give STATUS_INVALID_PARAMETER
// at post time.
type OpFlags uint32

const (
	// OpSilentSuccess is NDK_OP_FLAG_SILENT_SUCCESS: no completion if the request succeeds.
	OpSilentSuccess OpFlags = 0x1
	// OpReadFence is NDK_OP_FLAG_READ_FENCE: the request starts after every earlier Read of
	// the QP completed.
	OpReadFence OpFlags = 0x2
	// OpSendAndSolicitEvent is NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT: the peer's receive
	// completion satisfies an Arm(NotifySolicited).
	OpSendAndSolicitEvent OpFlags = 0x4
	// OpAllowRemoteRead is NDK_OP_FLAG_ALLOW_REMOTE_READ (Bind, FastRegister).
	OpAllowRemoteRead OpFlags = 0x8
	// OpAllowLocalWrite is NDK_OP_FLAG_ALLOW_LOCAL_WRITE (FastRegister).
	OpAllowLocalWrite OpFlags = 0x10
	// OpAllowRemoteWrite is NDK_OP_FLAG_ALLOW_REMOTE_WRITE (Bind, FastRegister); it includes
	// the local write bit.
	OpAllowRemoteWrite OpFlags = 0x30
	// OpInline is NDK_OP_FLAG_INLINE: the payload is copied at post time, the SGE tokens are
	// ignored, and the total must not exceed the QP's InlineDataSize.
	OpInline OpFlags = 0x40
	// OpRDMAReadSink is NDK_OP_FLAG_RDMA_READ_SINK (FastRegister; accepted, no effect: every
	// locally writable region may be a Read sink here).
	OpRDMAReadSink OpFlags = 0x80
	// OpRDMAReadLocalInvalidate is NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE: a Read that
	// completes successfully invalidates the fast-register MR of its first SGE.
	OpRDMAReadLocalInvalidate OpFlags = 0x100
	// OpDefer is NDK_OP_FLAG_DEFER: the request may wait until the next request posted
	// without it (NDKPI Deferred Processing Scheme).
	OpDefer OpFlags = 0x200
)

// The flags each verb accepts (the Flags parameter on each verb's NDKPI page).
const (
	sendFlags  = OpSilentSuccess | OpReadFence | OpSendAndSolicitEvent | OpInline | OpDefer
	writeFlags = OpSilentSuccess | OpReadFence | OpInline | OpDefer
	readFlags  = OpSilentSuccess | OpReadFence | OpRDMAReadLocalInvalidate | OpDefer
	bindFlags  = OpSilentSuccess | OpReadFence | OpAllowRemoteRead | OpAllowRemoteWrite | OpDefer
	frFlags    = bindFlags | OpAllowLocalWrite | OpRDMAReadSink
	invFlags   = OpSilentSuccess | OpReadFence | OpDefer
)

// MRFlags are the NDK_MR_FLAG_* values of RegisterMR (NDKPI NdkRegisterMr).
type MRFlags = memreg.MRFlags

// The NDK_MR_FLAG_* values.
const (
	// MRAllowLocalRead is NDK_MR_FLAG_ALLOW_LOCAL_READ (0: always granted).
	MRAllowLocalRead = memreg.MRAllowLocalRead
	// MRAllowLocalWrite is NDK_MR_FLAG_ALLOW_LOCAL_WRITE.
	MRAllowLocalWrite = memreg.MRAllowLocalWrite
	// MRAllowRemoteRead is NDK_MR_FLAG_ALLOW_REMOTE_READ.
	MRAllowRemoteRead = memreg.MRAllowRemoteRead
	// MRAllowRemoteWrite is NDK_MR_FLAG_ALLOW_REMOTE_WRITE (includes local write).
	MRAllowRemoteWrite = memreg.MRAllowRemoteWrite
	// MRRDMAReadSink is NDK_MR_FLAG_RDMA_READ_SINK (accepted; not required here).
	MRRDMAReadSink = memreg.MRRDMAReadSink
)

// NotifyType is an NDK_CQ_NOTIFY_* value for CQ.Arm.
type NotifyType uint32

const (
	// NotifyErrors is NDK_CQ_NOTIFY_ERRORS: only CQ errors (overrun).
	NotifyErrors NotifyType = 0
	// NotifyAny is NDK_CQ_NOTIFY_ANY: the next completion.
	NotifyAny NotifyType = 1
	// NotifySolicited is NDK_CQ_NOTIFY_SOLICITED: the next receive of a Send with
	// OpSendAndSolicitEvent, or any completion in error.
	NotifySolicited NotifyType = 2
)

// OpType is NDK_OPERATION_TYPE: what a completion reports (ResultEx.Type).
type OpType uint32

// The NDK_OPERATION_TYPE values.
const (
	OpTypeReceive              OpType = 1
	OpTypeReceiveAndInvalidate OpType = 0x8001
	OpTypeSend                 OpType = 2
	OpTypeFastRegister         OpType = 4
	OpTypeBind                 OpType = 8
	OpTypeInvalidate           OpType = 16
	OpTypeRead                 OpType = 32
	OpTypeWrite                OpType = 64
)

var opTypeNames = map[OpType]string{
	OpTypeReceive: "Receive", OpTypeReceiveAndInvalidate: "ReceiveAndInvalidate", OpTypeSend: "Send",
	OpTypeFastRegister: "FastRegister", OpTypeBind: "Bind", OpTypeInvalidate: "Invalidate",
	OpTypeRead: "Read", OpTypeWrite: "Write",
}

// String names the operation type as NDK does, without the NdkOperationType prefix.
func (t OpType) String() string {
	if n, ok := opTypeNames[t]; ok {
		return n
	}
	return "OpType(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// AdapterFlags are NDK_ADAPTER_FLAG_* values (AdapterInfo.Flags).
type AdapterFlags uint32

// The NDK_ADAPTER_FLAG_* values.
const (
	AdapterInOrderDMA              AdapterFlags = 0x1
	AdapterReadSinkNotRequired     AdapterFlags = 0x2
	AdapterCQInterruptModeration   AdapterFlags = 0x4
	AdapterMultiEngine             AdapterFlags = 0x8
	AdapterRDMAReadLocalInvalidate AdapterFlags = 0x10
	AdapterCQResize                AdapterFlags = 0x100
	AdapterLoopbackConnections     AdapterFlags = 0x10000
)
