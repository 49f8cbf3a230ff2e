package wire

import (
	"math"
	"strconv"
	"testing"
)

// TestPayloadBounds pins the MaxPayload range to the sizes it is derived from.
func TestPayloadBounds(t *testing.T) {
	if MinMaxPayload != 266 || MaxMaxPayload != 65527 {
		t.Fatalf("MaxPayload range [%d, %d], want [266, 65527]", MinMaxPayload, MaxMaxPayload)
	}
	// The smallest datagram still leaves a data packet a payload of at least one byte
	// with the longest extension and a piggybacked ack.
	longest := max(SendExtLen, RDMAExtLen, ReadRespLen)
	if room := MinMaxPayload - HeaderLen - longest - AckExtLen - TrailerLen; room < 1 {
		t.Fatalf("a data packet of MinMaxPayload bytes has room for %d payload bytes", room)
	}
	if MaxMaxPayload > math.MaxUint16 {
		t.Fatal("MaxMaxPayload does not fit the 16-bit field")
	}
}

// TestValidConnFields: every field a ConnRequest or ConnReply sets up a connection with is
// checked at its bounds, and every other opcode is refused.
func TestValidConnFields(t *testing.T) {
	base := func(op Opcode) Packet {
		p := Packet{Header: Header{Opcode: op}}
		p.CM = CMExt{ServiceID: 1, ConnID: 9, SrcQPN: 3, InitialPSN: 77, MaxPayload: 1472, IRD: 1, ORD: 1, DataPort: 50000}
		if op == OpConnReply {
			p.DestQPN, p.Cookie, p.CM.Cookie = 5, 0xc0ffee, 0xc0ffee
		}
		return p
	}
	type tc struct {
		name string
		edit func(p *Packet)
		ok   bool
	}
	common := []tc{
		{"valid", func(*Packet) {}, true},
		{"MaxPayload 0", func(p *Packet) { p.CM.MaxPayload = 0 }, false},
		{"MaxPayload 48", func(p *Packet) { p.CM.MaxPayload = 48 }, false},
		{"MaxPayload floor-1", func(p *Packet) { p.CM.MaxPayload = MinMaxPayload - 1 }, false},
		{"MaxPayload floor", func(p *Packet) { p.CM.MaxPayload = MinMaxPayload }, true},
		{"MaxPayload ceiling", func(p *Packet) { p.CM.MaxPayload = MaxMaxPayload }, true},
		{"MaxPayload ceiling+1", func(p *Packet) { p.CM.MaxPayload = MaxMaxPayload + 1 }, false},
		{"MaxPayload 65535", func(p *Packet) { p.CM.MaxPayload = math.MaxUint16 }, false},
		{"SrcQPN 0", func(p *Packet) { p.CM.SrcQPN = 0 }, false},
		{"DataPort 0", func(p *Packet) { p.CM.DataPort = 0 }, false},
		{"IRD and ORD 0", func(p *Packet) { p.CM.IRD, p.CM.ORD = 0, 0 }, true},
		{"IRD and ORD 255", func(p *Packet) { p.CM.IRD, p.CM.ORD = 255, 255 }, true},
	}
	for _, op := range []Opcode{OpConnRequest, OpConnReply} {
		cases := common
		if op == OpConnReply {
			cases = append(cases,
				tc{"cookie 0", func(p *Packet) { p.Cookie, p.CM.Cookie = 0, 0 }, false},
				tc{"extension cookie 0", func(p *Packet) { p.CM.Cookie = 0 }, false},
				tc{"cookie mismatch", func(p *Packet) { p.CM.Cookie ^= 1 }, false},
			)
		}
		for _, c := range cases {
			t.Run(op.String()+"/"+c.name, func(t *testing.T) {
				p := base(op)
				c.edit(&p)
				if got := ValidConnFields(&p); got != c.ok {
					t.Fatalf("ValidConnFields = %v, want %v (%+v)", got, c.ok, p.CM)
				}
			})
		}
	}
	for _, op := range []Opcode{OpReadyToUse, OpConnReject, OpDisconnectReq, OpDisconnectRep, OpSendOnly, OpAck} {
		p := base(OpConnRequest)
		p.Opcode = op
		if ValidConnFields(&p) {
			t.Errorf("%v: ValidConnFields accepted it", op)
		}
	}
}

// edgeSamples are valid datagrams with field values at the edges the receiver checks:
// seeds for FuzzParse, so that the fuzzer starts from the CM values ValidConnFields
// refuses and the data lengths the engine refuses.
func edgeSamples() []sample {
	var out []sample
	for _, s := range samples() {
		switch s.name {
		case "ConnRequest", "ConnReply":
			for _, v := range []uint16{0, 48, MinMaxPayload - 1, MinMaxPayload, MaxMaxPayload, MaxMaxPayload + 1} {
				x := s
				x.p.CM.MaxPayload = v
				x.name = s.name + "-MaxPayload" + strconv.Itoa(int(v))
				out = append(out, x)
			}
			x := s
			x.p.CM.SrcQPN, x.p.CM.DataPort = 0, 0
			x.name = s.name + "-zeroQPNPort"
			out = append(out, x)
		case "ReadRequest":
			x := s
			x.p.RDMA.Length = math.MaxUint32 - 100
			x.name = "ReadRequest-near4GiB"
			out = append(out, x)
		case "Ack":
			x := s
			x.p.Ack.Value = math.MaxUint16
			x.name = "Ack-RNRmax"
			out = append(out, x)
			// The recent-arrivals block may say anything: Parse takes it, the sender judges.
			x = s
			x.p.Ack.HighPSN, x.p.Ack.HighSACK = x.p.Ack.AckPSN-5, math.MaxUint64
			x.name = "Ack-HighBehind"
			out = append(out, x)
		}
	}
	return out
}
