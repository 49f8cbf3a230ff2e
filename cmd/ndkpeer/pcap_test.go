//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdpndk/xdpndk/internal/pcapng"
	"github.com/xdpndk/xdpndk/internal/privileged"
	"github.com/xdpndk/xdpndk/internal/testbed"
)

// ndkpeer --pcap on both sides of a bed of two queues: the server's one engine serves
// both queues, the client runs two engines (a queue each). The verbs of the tour, a
// ping-pong and a Write stream run; then each file must be a pcapng file with an
// interface per engine, tshark with contrib/wireshark/xdpndk.lua must decode every
// datagram in it as ours (an opcode, the CRC32C good, nothing malformed), the opcodes of
// every verb and of connection management must be there in both directions, and the
// summary ndkpeer prints must count what the file holds, none dropped.
func TestPcapCapture(t *testing.T) {
	privileged.Require(t)
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatalf("tshark not installed (Debian package tshark; make test installs it): %v", err)
	}
	script, err := filepath.Abs("../../contrib/wireshark/xdpndk.lua")
	if err != nil {
		t.Fatal(err)
	}
	bed := testbed.NewT(t, testbed.Options{Queues: 2, Name: "pcap"})
	a, b := bed.A, bed.B
	dir := t.TempDir()
	srvFile, cliFile := filepath.Join(dir, "server.pcapng"), filepath.Join(dir, "client.pcapng")
	srv := startServer(t, b, "--pcap", srvFile)
	peer := b.Addr.String()
	var cliOut []string
	for _, args := range [][]string{
		{"tour", "-i", a.Ifname, "--engines", "2", "--pcap", cliFile, peer},
		{"send-lat", "-i", a.Ifname, "-s", "64", "-n", "50", peer},
		{"write-bw", "-i", a.Ifname, "-s", "8192", "-n", "100", "-q", "2", peer},
	} {
		r := in(t, a, args...)
		if r.code != 0 {
			t.Fatalf("%v", r)
		}
		cliOut = append(cliOut, r.stderr)
	}
	if code := srv.stop(t); code != 0 {
		t.Fatalf("ndkpeer serve exit %d:\n%s", code, srv.output())
	}
	summary := regexp.MustCompile(`--pcap \S+: (\d+) datagrams written \([^)]*as sent and received\), (\d+) dropped`)
	for _, c := range []struct {
		file, out string
		engines   int
		ops       []string // opcodes that must be there (hex, as tshark shows them)
	}{
		// The server saw all three runs; the client file holds the tour only.
		{srvFile, srv.output(), 1, []string{"0x40", "0x41", "0x42", "0x04", "0x10", "0x20", "0x21", "0x30", "0x44", "0x45"}},
		{cliFile, cliOut[0], 2, []string{"0x40", "0x41", "0x42", "0x04", "0x10", "0x20", "0x21", "0x30"}},
	} {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			m := summary.FindStringSubmatch(c.out)
			if m == nil {
				t.Fatalf("no capture summary in the output:\n%s", c.out)
			}
			written, _ := strconv.Atoi(m[1])
			if m[2] != "0" || written == 0 {
				t.Errorf("summary: %s", m[0])
			}
			raw, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := pcapng.Read(raw)
			if err != nil {
				t.Fatalf("%s: %v", c.file, err)
			}
			ifaces, epbs := 0, 0
			for _, bl := range blocks {
				switch bl.Type {
				case pcapng.BlockIDB:
					ifaces++
				case pcapng.BlockEPB:
					epbs++
				}
			}
			if ifaces != c.engines || epbs != written {
				t.Errorf("%d interfaces, %d packets; want %d interfaces (one per engine) and the %d the summary counts", ifaces, epbs, c.engines, written)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, tshark, "-n", "-X", "lua_script:"+script, "-r", c.file, "-T", "fields",
				"-E", "separator=|", "-e", "frame.interface_id", "-e", "frame.packet_flags_direction",
				"-e", "xdpndk.opcode", "-e", "xdpndk.crc.status", "-e", "xdpndk.malformed", "-e", "_ws.malformed",
				"-e", "_ws.col.Info")
			cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("tshark: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != written {
				t.Fatalf("tshark read %d packets, the file has %d", len(lines), written)
			}
			seen := map[string]int{}
			perIface := map[string]int{}
			dirs := map[string]int{}
			bad := 0
			for _, ln := range lines {
				f := strings.Split(ln, "|")
				if len(f) != 7 || f[2] == "" || f[3] != "1" || f[4] != "" || f[5] != "" {
					if bad++; bad <= 10 {
						t.Errorf("not decoded as a good xdpndk datagram: %q", ln)
					}
					continue
				}
				perIface[f[0]]++
				dirs[f[1]]++
				for _, op := range strings.Split(f[2], ",") {
					seen[op]++
				}
			}
			for _, op := range c.ops {
				if seen[op] == 0 {
					t.Errorf("opcode %s never seen; seen %v", op, seen)
				}
			}
			if dirs["0x00000001"] == 0 || dirs["0x00000002"] == 0 || len(dirs) != 2 {
				t.Errorf("directions %v: want inbound and outbound only", dirs)
			}
			t.Logf("%s: %d datagrams, per interface %v, directions %v, opcodes %v", filepath.Base(c.file), written, perIface, dirs, seen)
			if keep := os.Getenv("XDPNDK_KEEP_PCAP"); keep != "" {
				_ = os.WriteFile(fmt.Sprintf("%s.%s", keep, filepath.Base(c.file)), raw, 0o644)
			}
		})
	}
}
