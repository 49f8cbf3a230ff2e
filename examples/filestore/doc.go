// Command filestore is a remote file store on xdpndk's NDK verbs (package ndk), and an
// example of them: a server keeps files in one registered memory region, clients put files
// into it with RDMA Writes and get them back with RDMA Reads, and control messages travel
// as Sends. It uses only ndk's public API (and xdp.DefaultConfig to open an adapter).
//
//	filestore serve -i IFACE [-addr ADDR:PORT] [-store-mib N] [-max-conns N] [-max-files N]
//	filestore put   -i IFACE SERVER[:PORT] LOCALFILE NAME
//	filestore get   -i IFACE SERVER[:PORT] NAME LOCALFILE
//
// Run serve on one host and put and get on another (one xdpndk process per interface):
// both hosts use the same UDP port (xdp.DefaultPort, 4793), which the XDP program takes off
// the interface; the server listens on NDK port 4810 (-addr) multiplexed on it. Root, or
// the capabilities README.md lists, is needed on both. Exit status: 0 on success, 1 when
// the operation failed (the message says why; ndk's failures carry their NTSTATUS name,
// e.g. STATUS_CONNECTION_REFUSED), 2 for a bad command line. serve runs until SIGINT or
// SIGTERM, then disconnects its clients, closes the adapter and exits 0.
//
// # Protocol
//
// A client connects one QP to the server's listener for each command and runs one
// transfer on it:
//
//	client                                            server
//	──────                                            ──────
//	Send PUT name size ─────────────────────────────▶ reserve size bytes of the store;
//	                                                  Bind a window over them (remote write)
//	                 ◀───────────────────────────── Send reply: the window (RemoteBuffer)
//	Write chunk 0 ─────────────────────────────────▶ (the bytes land in the store;
//	Write chunk 1 ─────────────────────────────────▶  the server's CPU is not involved)
//	  ... (8 in flight)
//	Send COMMIT name size crc32 ────────────────────▶ its receive completes after every Write's
//	                                                  data landed: Invalidate the window,
//	                                                  check the CRC, store the file (or not)
//	                 ◀───────────────────────────── Send reply: OK, or BAD CRC
//
//	Send GET name ──────────────────────────────────▶ Bind a window over the file (remote read)
//	                 ◀───────────────────────────── Send reply: the window, size, crc32
//	Read chunk 0, 1, ... (8 in flight) ◀────────────▶ (served from the store)
//	check the CRC, write the local file
//	Send DONE name ─────────────────────────────────▶ Invalidate the window
//	                 ◀───────────────────────────── Send reply: OK
//
// A window opens exactly one file's bytes, for one kind of access, to one connection, for
// one transfer: the store's own region is registered for local access only, so its token
// gives a peer nothing, and a client can neither touch another file nor write a file
// after its COMMIT (the Invalidate comes before the CRC check). A refused request is a
// reply with a code ("no such file", "not enough free space in the store", ...). A file of
// 0 bytes is stored and fetched like any other, without a window (there are no bytes to
// open one over): the replies carry size 0 and the zero RemoteBuffer, and no Write or
// Read is posted. A PUT of an existing name replaces the file at COMMIT; a GET that
// opened the old one still reads it.
//
// Every control message is 108 bytes (RemoteBuffer's encoding inside it; integers in
// network byte order):
//
//	offset  size  field
//	0       2     magic "FS"
//	2       1     version, 1
//	3       1     type: PUT 1, COMMIT 2, GET 3, DONE 4; a reply is its request's | 0x80
//	4       2     code (replies): 0 OK, 1 no such file, 2 no space, 3 larger than the store,
//	              4 bad CRC, 5 malformed request, 6 out of order, 7 too many files, 8 server error
//	6       1     name length, 1 to 64 (requests), 0 (replies)
//	7       1     zero
//	8       8     size: PUT, COMMIT, and the replies to PUT and GET; at most 1 TiB
//	16      4     CRC-32 (IEEE) of the data: COMMIT and GET's reply
//	20      4     zero
//	24      20    RemoteBuffer (address, length, token): the replies to PUT and GET
//	44      64    name: letters, digits, '.', '_', '-', not starting with '.'; zero after it
//
// A field the type does not carry must be zero, so each message has one encoding; the
// parser (parseMessage, fuzzed by FuzzParseMessage) checks every field and never trusts a
// length. A malformed request is answered "malformed request"; what is not a request at
// all ends the connection.
//
// # The ndk calls, and what each is for
//
// Both sides:
//   - ndk.Open(xdp.DefaultConfig(iface), opts) opens the adapter: AF_XDP sockets on the
//     interface's queues, the XDP program, the protocol engine. Options.HeapSize sizes the
//     UMEM heap that Adapter.Alloc carves (the server's store, every side's buffers);
//     Options.Logger receives its events. Adapter.Close ends it all, bounded by a context.
//   - Adapter.NewPD, NewCQ and PD.NewQP: a protection domain for the memory and the QPs,
//     one CQ per connection for all its completions, one QP per connection.
//   - Adapter.Alloc and PD.RegisterMR: pinned memory from the UMEM heap, registered so
//     that verbs may use it; MR.SGE names a part of it in a request.
//   - QP.Receive and QP.Send: the control messages. A receive is posted before the
//     message can come (the server reposts its one receive as soon as a request arrived).
//   - CQ.Wait: every wait, of both sides, is a Wait on the connection's CQ. It returns
//     the completions (each with the request context it was posted with: a verb, or the
//     client's chunk), a *ndk.ConnectionEnded when the peer disconnects or the connection
//     aborts, or the context's end (the server's stop, a client's reply timeout).
//
// The server:
//   - Adapter.NewListener and Listener.Listen: the callback runs on the adapter's event
//     goroutine for every incoming connection; it starts a goroutine that creates the
//     connection's objects and calls Connector.Accept (or Connector.Reject, whose private
//     data tells the client why).
//   - PD.NewMW, QP.Bind and MW.Remote: a window over one file's bytes, with
//     OpAllowRemoteWrite (PUT) or OpAllowRemoteRead (GET); its RemoteBuffer is valid once
//     Bind returns and travels to the client in the reply (RemoteBuffer.AppendBinary).
//   - QP.Invalidate: the window's token stops working when it returns (COMMIT, DONE).
//   - Connector.Close, QP.Close, MW.Close and MR.Deregister clean a connection up, in
//     that order: the client is told, outstanding requests complete and release their
//     memory, the window is invalidated before the space it opened is reused.
//
// The client:
//   - Adapter.NewConnector, Connector.Connect and CompleteConnect: the connection, with
//     the Reads it will keep outstanding as its outbound read limit.
//   - RemoteBuffer.UnmarshalBinary (inside parseMessage) turns the reply's 20 bytes back
//     into the window; QP.Write and QP.Read take its address plus an offset and its token.
//     Eight chunks of 256 KiB are in flight; a QP's requests complete in posting order,
//     so the oldest chunk is the next free one.
//   - The COMMIT Send is posted right behind the last Writes, without waiting for them:
//     the QP delivers a Send after the data of the Writes posted before it (ndk's QP
//     documentation), so when the server's receive of COMMIT completes, the file's bytes
//     are in its memory.
//   - Connector.Close disconnects at the end; the server sees it in its CQ.Wait.
package main
