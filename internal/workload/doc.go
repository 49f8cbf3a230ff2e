// Package workload drives a seeded, verified mix of NDK verbs between an Initiator and a
// Target through the public ndk API, for tests and soak runs on any link (simlink, AF_XDP,
// a faultlink wrapper of either), with the target in the same process or another one.
//
//	Initiator (Dial, Run)                                  Target (NewTarget, Run)
//	─────────────────────                                  ───────────────────────
//	control QP ◄──── hello in connect private data ──────► session: PD, control QP
//	            ◄─── window tokens, receipts ────────────  (announce, answer reports)
//	            ──── releases, reports ─────────────────►
//	data QP i  ◄──── layout in accept private data ──────  region: write slots | windows |
//	 (its CQs,                                              read area (pattern), receives,
//	 UMEM or Go  ─── Send / SendAndInvalidate ──────────►  every byte checked, repost
//	 memory)     ─── Write, Read back, compare ─────────►  (write slot of the request)
//	             ─── Read, check pattern ───────────────►  (read area)
//	             ─── Write through window, Read back, ──►  Bind, Invalidate, rebind
//	                 release (SendAndInvalidate or msg)
//
// Every byte is a function of the seed, the connection and the message or operation number
// (pattern.go), so the receiver of a Send checks it without being told, Reads are checked
// against the target's pattern, and Writes are read back and compared. The initiator keeps
// Config.Outstanding operations in flight per data connection; each operation is a short
// chain of requests (Write then Read-back, ...). At the end of Run the initiator asks the
// target, per connection, for a receipt of what it received and checked. Report.Err is nil
// only if every completion succeeded, every byte matched on both sides and the target
// received exactly what was sent.
//
// Tokens and addresses travel only in connection private data and control messages, so
// the target may live in another process (the privileged tests run it in a child process
// inside another network namespace, and stop, resume or kill it).
package workload
