package workload

import "encoding/binary"

// Every byte the workload moves is a function of the seed and of where it belongs, so either
// side can check it without being told the bytes: byte i of stream key is byte i%8 of
// mix64(key + i/8).

// mix64 is the splitmix64 finaliser.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// rng is a splitmix64 generator.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix64(r.s)
}

// intn returns a value in [0, n) for n > 0.
func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// fillStream writes bytes off.. of stream key into b.
func fillStream(b []byte, key uint64, off int) {
	i := 0
	for i < len(b) {
		w := mix64(key + uint64(off+i)/8)
		if (off+i)%8 == 0 && len(b)-i >= 8 {
			binary.LittleEndian.PutUint64(b[i:], w)
			i += 8
			continue
		}
		b[i] = byte(w >> (8 * ((off + i) % 8)))
		i++
	}
}

// checkStream returns the index of the first byte of b that is not byte off+index of
// stream key, or -1.
func checkStream(b []byte, key uint64, off int) int {
	i := 0
	for i < len(b) {
		w := mix64(key + uint64(off+i)/8)
		if (off+i)%8 == 0 && len(b)-i >= 8 {
			if binary.LittleEndian.Uint64(b[i:]) == w {
				i += 8
				continue
			}
		}
		if b[i] != byte(w>>(8*((off+i)%8))) {
			return i
		}
		i++
	}
	return -1
}

// Stream keys: data messages (checked by the target), the read area (written by the target
// at setup, checked by the initiator after Reads) and written data (compared by the
// initiator after reading it back).
func sendKey(seed uint64, conn int, seq uint64) uint64 {
	return mix64(seed ^ 0x53454e44<<32 ^ uint64(conn)<<48 ^ seq*0x100000001b3)
}

func readKey(seed uint64, conn int) uint64 { return mix64(seed ^ 0x52454144<<32 ^ uint64(conn)<<48) }

func writeKey(seed uint64, conn int, op uint64) uint64 {
	return mix64(seed ^ 0x57524954<<32 ^ uint64(conn)<<48 ^ op*0x9e3779b1)
}

// pickSize draws a transfer length in [1, max]: a quarter tiny (up to 64 bytes), a quarter
// up to one small packet, half anywhere up to max (several packets).
func pickSize(r uint64, max int) int {
	var lim int
	switch r % 4 {
	case 0:
		lim = 64
	case 1:
		lim = 1400
	default:
		lim = max
	}
	lim = min(lim, max)
	return 1 + int((r>>8)%uint64(lim))
}

// sendSize is the length of data message seq of a connection: both sides derive it.
func sendSize(seed uint64, conn int, seq uint64, max int) int {
	return pickSize(mix64(sendKey(seed, conn, seq)^0xa5a5), max)
}
