package wire

import (
	"strconv"
	"testing"
)

func sendDatagram(b *testing.B, size int) []byte {
	p := Packet{Header: hdr(OpSendMiddle, FlagAckReq, 1000)}
	n := size - HeaderLen - SendExtLen - TrailerLen
	p.Send = SendExt{MSN: 3, Offset: 4096, Total: 1 << 20}
	return dgram(b, &p, pattern(n, 1))
}

func BenchmarkEncodeSend(b *testing.B) {
	p := Packet{Header: hdr(OpSendFirst, FlagAckReq, 1000)}
	p.Send = SendExt{MSN: 3, Offset: 0, Total: 1 << 20}
	var buf [HeaderLen + SendExtLen]byte
	b.ReportAllocs()
	for b.Loop() {
		p.PSN++
		if _, err := Encode(buf[:], &p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeAck(b *testing.B) {
	s := samples()
	var p Packet
	for _, x := range s {
		if x.name == "Ack" {
			p = x.p
		}
	}
	var buf [HeaderLen + AckExtLen]byte
	b.ReportAllocs()
	for b.Loop() {
		p.Ack.AckPSN++
		if _, err := Encode(buf[:], &p); err != nil {
			b.Fatal(err)
		}
	}
}

func benchParse(b *testing.B, segs [][]byte) {
	n := 0
	for _, s := range segs {
		n += len(s)
	}
	var p Packet
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(segs, &p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseSendHeader parses a Send whose payload is empty: the header and extension
// checks plus a 40-byte CRC, the closest to "parse without CRC" the API offers.
func BenchmarkParseSendHeader(b *testing.B) {
	p := Packet{Header: hdr(OpSendOnly, 0, 1000)}
	benchParse(b, [][]byte{dgram(b, &p, nil)})
}

func BenchmarkParseSend1500(b *testing.B) {
	benchParse(b, [][]byte{sendDatagram(b, 1500)})
}

// BenchmarkParseSend8972x3 parses a jumbo datagram as AF_XDP multi-buffer delivers it from
// 4 KiB frames: 4054 bytes after the 42-byte Ethernet/IPv4/UDP headers, 4096, then the rest.
func BenchmarkParseSend8972x3(b *testing.B) {
	d := sendDatagram(b, 8972)
	benchParse(b, split(d, 4054, 4054+4096))
}

func BenchmarkParseAck(b *testing.B) {
	a := Packet{Header: hdr(OpAck, 0, 0)}
	a.Ack = AckExt{AckPSN: 1001, SACK: 5, Credits: 12}
	benchParse(b, [][]byte{dgram(b, &a, nil)})
}

func BenchmarkCRC(b *testing.B) {
	for _, n := range []int{40, 64, 1500, 4096, 8972} {
		buf := pattern(n, 1)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			var c uint32
			for b.Loop() {
				c = UpdateCRC(c, buf)
			}
			_ = c
		})
	}
}
