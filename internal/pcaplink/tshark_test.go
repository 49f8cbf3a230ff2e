package pcaplink

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/transport/link"
	"github.com/xdpndk/xdpndk/transport/wire"
)

// datagram returns the wire encoding of p followed by payload and a correct trailer.
func datagram(t *testing.T, p *wire.Packet, payload []byte) []byte {
	t.Helper()
	b := make([]byte, 512)
	n, err := wire.Encode(b, p)
	if err != nil {
		t.Fatal(err)
	}
	d := append(append(b[:n:n], payload...), 0, 0, 0, 0)
	wire.PutTrailer(d[len(d)-wire.TrailerLen:], wire.UpdateCRC(0, d[:len(d)-wire.TrailerLen]))
	return d
}

// tshark decodes what a capture wrote, with the dissector of contrib/wireshark: over IPv4
// and IPv6, both directions, whole and cut by the snap length, every datagram is ours,
// with the opcode sent, the direction recorded, the UDP checksum of IPv6 good (tshark
// told to check it) and nothing malformed.
func TestTsharkDecodes(t *testing.T) {
	bin := privileged.Tool(t, "tshark", "tshark")
	script, err := filepath.Abs("../../contrib/wireshark/xdpndk.lua")
	if err != nil {
		t.Fatal(err)
	}
	send := wire.Packet{Header: wire.Header{Opcode: wire.OpSendOnly, Flags: wire.FlagAckReq, DestQPN: 7, PSN: 100, Cookie: 0x1122334455667788}}
	send.Send = wire.SendExt{MSN: 3, Total: 1000}
	ack := wire.Packet{Header: wire.Header{Opcode: wire.OpAck, DestQPN: 9, Cookie: 0x1122334455667788}}
	ack.Ack = wire.AckExt{AckPSN: 101, Credits: 4, HighPSN: 101}
	sd, ad := datagram(t, &send, pattern(1000, 1)), datagram(t, &ack, nil)
	for _, c := range []struct {
		name          string
		local, remote string
		snap          int
	}{
		{"ipv4", local4.String(), remote4.String(), 0},
		{"ipv6", local6.String(), remote6.String(), 0},
		{"ipv6-snap", local6.String(), remote6.String(), 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.pcapng")
			cp, err := Create(path, Config{SnapLen: c.snap})
			if err != nil {
				t.Fatal(err)
			}
			in := &stub{local: mustAP(c.local), accept: -1}
			l, err := cp.Wrap(in, "eth-test")
			if err != nil {
				t.Fatal(err)
			}
			in.rx = []link.Packet{pkt(mustAP(c.remote), 0, ad)}
			tx := [1]link.Packet{pkt(mustAP(c.remote), 0, sd[:30], sd[30:])}
			_, _ = l.Send(tx[:])
			var rx [2]link.Packet
			_, _ = l.Receive(rx[:])
			if st, err := cp.Close(); err != nil || st.Packets != 2 {
				t.Fatalf("close: %+v %v", st, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-n", "-X", "lua_script:"+script, "-o", "udp.check_checksum:TRUE",
				"-r", path, "-T", "fields", "-E", "separator=|", "-e", "frame.packet_flags_direction",
				"-e", "udp.checksum.status", "-e", "xdpndk.opcode", "-e", "_ws.malformed", "-e", "xdpndk.malformed",
				"-e", "_ws.col.Info")
			cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("tshark: %v\n%s", err, out)
			}
			var lines []string
			for _, ln := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if strings.Count(ln, "|") == 5 {
					lines = append(lines, ln)
				}
			}
			if len(lines) != 2 {
				t.Fatalf("tshark printed %d packets:\n%s", len(lines), out)
			}
			// Direction (1 inbound, 2 outbound); UDP checksum status: IPv4 3 (not present),
			// IPv6 1 (good), or 2 (unverified) for the record cut by the snap length, which
			// Wireshark cannot check (TestIPv6AndSnapLength checks its value); opcode;
			// nothing malformed.
			for i, want := range []struct{ dir, op string }{{"0x00000002", "0x04"}, {"0x00000001", "0x30"}} {
				cs := map[string]string{"ipv4": "3", "ipv6": "1", "ipv6-snap": "1"}[c.name]
				if c.name == "ipv6-snap" && i == 0 {
					cs = "2"
				}
				f := strings.Split(lines[i], "|")
				if f[0] != want.dir || f[1] != cs || f[2] != want.op || f[3] != "" || f[4] != "" {
					t.Errorf("packet %d: %q; want direction %s, checksum status %s, opcode %s, nothing malformed\n%s",
						i, lines[i], want.dir, cs, want.op, out)
				}
			}
			if c.snap > 0 && !strings.Contains(lines[0], "captured 152 of 1044 bytes") {
				t.Errorf("the cut record: %q", lines[0])
			}
		})
	}
}

func mustAP(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
