// Package faultlink wraps any link.Link and impairs what it transmits, so the
// protocol's recovery can be tested on the real AF_XDP path as well as on simlink:
//
//	engine ── Send ──► faultlink.Link ──────────────────────────► inner Link ──► wire
//	                   │ per datagram, seeded:                      ▲
//	                   │   drop       nothing is sent               │
//	                   │   reorder    copy held back, sent after    │
//	                   │              the next 1..MaxHold datagrams │
//	                   │              (or HoldTime, whichever first)│
//	                   │   corrupt    a copy with one byte flipped ─┤ (the CRC32C
//	                   │              is sent instead               │  trailer fails)
//	                   │   duplicate  the datagram, then a copy ────┤
//	                   │   pass       the datagram as given ────────┘
//	engine ◄─ Receive ─ injected datagrams (Inject), then the inner link's; a tap
//	                    (Record) keeps copies of what the inner link delivered
//
// The wrapper keeps the link.Link contract: it reads the caller's segments only during
// Send (copies live in buffers preallocated by Wrap); a FlagZeroCopy datagram it drops,
// holds or replaces by a copy has its cookie reported by the wrapper's own TxDone, once,
// ahead of the inner link's cookies, while a datagram it passes on (also the original of a
// duplicate) keeps its flag and its cookie is the inner link's to report; Send's
// n < len(pkts) back-pressure and first-error semantics are those of the inner link, per
// datagram the caller handed in. Nothing allocates per datagram.
//
// Decisions come from a splitmix64 generator seeded by Config.Seed, one draw per
// impairment per datagram offered, so a run is reproducible given the seed and the same
// sequence of calls and inner-link answers (on simlink with a manual clock, exactly).
package faultlink
