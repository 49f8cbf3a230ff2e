package transport

import "github.com/xdpndk/xdpndk/transport/link"

// The link contract lives in package transport/link, a leaf that link implementations
// (xdp, transport/simlink) import without importing the engine. These names re-export it.

// MaxSegments is link.MaxSegments: the most pieces one Packet may have.
const MaxSegments = link.MaxSegments

// FlagZeroCopy is link.FlagZeroCopy.
const FlagZeroCopy = link.FlagZeroCopy

type (
	// Packet is link.Packet: one UDP datagram crossing a Link.
	Packet = link.Packet
	// PacketFlag is link.PacketFlag.
	PacketFlag = link.PacketFlag
	// Link is link.Link: what the engine sends and receives on.
	Link = link.Link
	// PeerResolver is link.PeerResolver.
	PeerResolver = link.PeerResolver
	// Watcher is link.Watcher.
	Watcher = link.Watcher
	// LinkStats is link.Stats: a link's counters.
	LinkStats = link.Stats
	// CookieQueue is link.CookieQueue.
	CookieQueue = link.CookieQueue
)

var (
	// ErrClosed is link.ErrClosed: returned by a Link's methods after Close.
	ErrClosed = link.ErrClosed
	// ErrTooLarge is link.ErrTooLarge: a datagram longer than MaxPayload.
	ErrTooLarge = link.ErrTooLarge
)

// NewCookieQueue is link.NewCookieQueue.
func NewCookieQueue(capacity int) CookieQueue { return link.NewCookieQueue(capacity) }
