// Package wireshark holds the tests of xdpndk.lua, the Wireshark dissector of the xdpndk wire
// protocol (docs/PROTOCOL.md) that lives in this directory; README.md here says how to use
// it.
//
// The tests run the dissector in tshark, never Wireshark's GUI: dissector_test.go over
// captures it writes itself from datagrams that transport/wire encodes (every opcode, the
// worked example of docs/PROTOCOL.md §8, every check of §9 broken once, and a seeded
// corpus of mutated datagrams whose verdicts must match wire.Parse's), with no privilege;
// dissector_linux_test.go over a capture of real traffic between two ndk adapters on the
// routed test bed, taken on the router (root). Both need tshark with Lua (Debian's package
// tshark); without it they fail when XDPNDK_REQUIRE_PRIVILEGED=1 and are skipped otherwise.
//
// It has no code of its own to import.
package wireshark
