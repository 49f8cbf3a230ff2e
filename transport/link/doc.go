// Package link is the contract between xdpndk's protocol engine (package transport) and
// what moves its datagrams: the Link interface, the Packet it moves, the counters and errors
// of a link, and the CookieQueue that links use to report zero-copy transmissions.
//
//	transport (the engine) ──uses──▶ link.Link ◀──implements── xdp (AF_XDP), transport/simlink
//
// It is a leaf: it imports only the standard library, so a link implementation depends on
// the contract and never on the engine (as wireguard-go's device depends on conn.Bind, which
// its bind implementations provide). Every name here has this one spelling: the engine,
// the links and package ndk all write link.Link, link.Packet and so on.
package link
