package frame

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpndk/xdpndk/internal/testbed"
)

// snmpCounter reads counter name of protocol proto ("Udp", "Ip") from the /proc/net/snmp
// of the calling thread's network namespace.
func snmpCounter(proto, name string) (uint64, error) {
	f, err := os.Open("/proc/thread-self/net/snmp")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var header []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != proto+":" {
			continue
		}
		if header == nil {
			header = fields
			continue
		}
		for i, h := range header {
			if h == name && i < len(fields) {
				return strconv.ParseUint(fields[i], 10, 64)
			}
		}
		return 0, fmt.Errorf("no %s %s counter", proto, name)
	}
	return 0, fmt.Errorf("no %s counters: %v", proto, sc.Err())
}

// hostCounter reads an SNMP counter inside h's namespace.
func hostCounter(t testing.TB, h *testbed.Host, proto, name string) uint64 {
	t.Helper()
	var v uint64
	if err := h.Do(func() (err error) { v, err = snmpCounter(proto, name); return err }); err != nil {
		t.Fatalf("read %s %s: %v", proto, name, err)
	}
	return v
}

// TestEncapKernelAccepts proves Put's headers and checksums against the Linux stack: frames
// built by Encap.Put are written raw (AF_PACKET) into host A's end of a test bed, and a
// kernel UDP socket in host B must receive exactly the payloads. The kernel verifies the
// IPv4 header checksum and, for these software-made packets, the UDP checksum, and drops bad
// ones: the negative controls show it does, by sending frames with a wrong checksum first
// and watching the drop counters. All traffic stays inside the bed, and every send is a
// single bounded write.
func TestEncapKernelAccepts(t *testing.T) {
	// Static neighbours: B's kernel sends to A (last subtest) without an ARP exchange.
	bed := testbed.NewT(t, testbed.Options{MTU: 9000, StaticNeighbors: true})
	a, b := bed.A, bed.B
	macA, macB := [6]byte(a.MAC), [6]byte(b.MAC)

	const port = 4791
	conn := listenUDP(t, b, port)

	var pfd int
	err := a.Do(func() (err error) {
		pfd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0) // protocol 0: send only
		if err != nil {
			return err
		}
		return unix.Bind(pfd, &unix.SockaddrLinklayer{Ifindex: a.IfIndex})
	})
	if err != nil {
		t.Fatalf("AF_PACKET socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(pfd) })

	send := func(t *testing.T, frame []byte) {
		t.Helper()
		n, err := unix.Write(pfd, frame)
		if err != nil || n != len(frame) {
			t.Fatalf("write frame: %d, %v", n, err)
		}
	}
	recv := func(t *testing.T, c *net.UDPConn, want []byte, from netip.AddrPort) {
		t.Helper()
		buf := make([]byte, 65536)
		if err := c.SetReadDeadline(time.Now().Add(3 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, src, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("kernel socket received nothing: %v", err)
		}
		if src != from {
			t.Fatalf("datagram from %v, want %v", src, from)
		}
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("kernel received %d bytes %.32x..., want %d bytes %.32x...", n, buf[:n], len(want), want)
		}
	}

	base := Encap{
		SrcMAC: macA, DstMAC: macB,
		Src: a.Addr, Dst: b.Addr,
		SrcPort: 40000, DstPort: port,
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []struct {
		name    string
		payload int
		segs    []int
		srcPort uint16
		pad     int
	}{
		{name: "empty", payload: 0},
		{name: "one byte", payload: 1},
		{name: "odd 17", payload: 17, segs: []int{3, 5}},
		{name: "odd 1471 segmented", payload: 1471, segs: []int{1, 700, 77}},
		{name: "full 1472", payload: 1472},
		{name: "jumbo 8971 odd segs", payload: 8971, segs: []int{999, 1, 4095}},
		{name: "src port override", payload: 100, srcPort: 61234},
		{name: "ethernet padding", payload: 3, pad: 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := base
			mustValidate(t, &e)
			payload := randBytes(r, tc.payload)
			frame := append(buildFrame(t, &e, tc.srcPort, payload, tc.segs...), make([]byte, tc.pad)...)
			sport := tc.srcPort
			if sport == 0 {
				sport = e.SrcPort
			}
			send(t, frame)
			recv(t, conn, payload, netip.AddrPortFrom(e.Src, sport))
		})
	}

	t.Run("bad UDP checksum is dropped", func(t *testing.T) {
		e := base
		mustValidate(t, &e)
		bad := buildFrame(t, &e, 0, []byte("corrupted checksum"))
		bad[e.HeaderLen()-1] ^= 0x01
		good := buildFrame(t, &e, 0, []byte("after the bad one"))
		before := hostCounter(t, b, "Udp", "InCsumErrors")
		send(t, bad)
		send(t, good)
		recv(t, conn, []byte("after the bad one"), netip.AddrPortFrom(e.Src, e.SrcPort))
		if after := hostCounter(t, b, "Udp", "InCsumErrors"); after != before+1 {
			t.Fatalf("Udp InCsumErrors went %d -> %d, want +1: the kernel did not check UDP checksums", before, after)
		}
	})

	t.Run("bad IPv4 header checksum is dropped", func(t *testing.T) {
		e := base
		mustValidate(t, &e)
		bad := buildFrame(t, &e, 0, []byte("corrupted ip header"))
		bad[14+10] ^= 0x80
		good := buildFrame(t, &e, 0, []byte("after the bad header"))
		before := hostCounter(t, b, "Ip", "InHdrErrors")
		send(t, bad)
		send(t, good)
		recv(t, conn, []byte("after the bad header"), netip.AddrPortFrom(e.Src, e.SrcPort))
		after := hostCounter(t, b, "Ip", "InHdrErrors")
		if after != before+1 {
			t.Fatalf("Ip InHdrErrors went %d -> %d, want +1", before, after)
		}
	})

	// The kernel's own datagrams parse with ParseUDP and carry checksums that
	// VerifyUDPChecksum accepts: B sends to A, A reads the raw frame.
	t.Run("kernel frames parse", func(t *testing.T) {
		var rfd int
		err := a.Do(func() (err error) {
			proto := int(htons(unix.ETH_P_IP))
			rfd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
			if err != nil {
				return err
			}
			sa := &unix.SockaddrLinklayer{Ifindex: a.IfIndex, Protocol: htons(unix.ETH_P_IP)}
			if err := unix.Bind(rfd, sa); err != nil {
				return err
			}
			tv := unix.NsecToTimeval((3 * time.Second).Nanoseconds())
			return unix.SetsockoptTimeval(rfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		})
		if err != nil {
			t.Fatalf("AF_PACKET receive socket: %v", err)
		}
		defer unix.Close(rfd)
		// With TX checksum offload on, veth passes CHECKSUM_PARTIAL packets whose UDP
		// checksum field holds only the pseudo-header sum; turn it off so B's kernel
		// computes the full checksum in software, as it would for a real wire.
		hostRun(t, b, "ethtool", "-K", b.Ifname, "tx", "off")
		payload := []byte("from the kernel, odd length")
		if _, err := conn.WriteToUDPAddrPort(payload, netip.AddrPortFrom(a.Addr, 40000)); err != nil {
			t.Fatalf("kernel send: %v", err)
		}
		buf := make([]byte, 2048)
		for range 10 { // skip anything else the kernel may have put on the wire; bounded
			n, err := unix.Read(rfd, buf)
			if err != nil {
				t.Fatalf("raw receive: %v", err)
			}
			var d Datagram
			if err := ParseUDP(buf[:n], n, &d); err != nil || d.Dst.Port() != 40000 {
				continue
			}
			if got := d.Payload(buf[:n]); !bytes.Equal(got, payload) {
				t.Fatalf("payload %q, want %q", got, payload)
			}
			if d.Src != netip.AddrPortFrom(b.Addr, port) || d.SrcMAC != macB || d.DstMAC != macA {
				t.Fatalf("parsed %+v", d)
			}
			if binary.BigEndian.Uint16(buf[d.PayloadOffset-2:]) == 0 {
				t.Fatal("kernel frame has no UDP checksum")
			}
			if err := VerifyUDPChecksum(&d, buf[:n]); err != nil {
				t.Fatalf("VerifyUDPChecksum of a kernel frame: %v", err)
			}
			return
		}
		t.Fatal("kernel datagram not seen on the wire")
	})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
