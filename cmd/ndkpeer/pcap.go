//go:build linux

package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/xdpndk/xdpndk/internal/pcaplink"
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/ndk"
	"github.com/xdpndk/xdpndk/transport/link"
)

// pcapFlags are the capture options of every command that opens an adapter: --pcap FILE
// records every datagram the adapter's engines send and receive (docs/CAPTURE.md).
type pcapFlags struct {
	file   string
	snap   int
	buffer sizeFlag
}

// define adds the capture options to fs.
func (f *pcapFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.file, "pcap", "", "write every datagram the adapter sends and receives to `FILE` (pcapng; IP and UDP headers made up; contrib/wireshark/xdpndk.lua decodes them)")
	fs.IntVar(&f.snap, "pcap-snaplen", 0, fmt.Sprintf("with --pcap, record at most `BYTES` of each datagram, IP and UDP headers included (0: whole; else at least %d)", pcaplink.MinSnapLen))
	f.buffer.n = pcaplink.DefaultBuffer
	fs.Var(&f.buffer, "pcap-buffer", "with --pcap, the `SIZE` of each engine's capture ring: a datagram that finds it full is dropped from the file, and counted")
}

// config checks the options and returns the capture's configuration (file "" for none).
func (f *pcapFlags) config() (pcapConfig, error) {
	c := pcapConfig{file: f.file, cfg: pcaplink.Config{SnapLen: f.snap, Buffer: int(f.buffer.n), App: "ndkpeer " + readVersion().Version}}
	if f.file == "" {
		return c, nil
	}
	if f.buffer.n < pcaplink.MinBuffer || f.buffer.n > pcaplink.MaxBuffer {
		return c, fmt.Errorf("--pcap-buffer %s: not in [%s, %s]", formatSize(f.buffer.n), formatSize(pcaplink.MinBuffer), formatSize(pcaplink.MaxBuffer))
	}
	if f.snap != 0 && (f.snap < pcaplink.MinSnapLen || f.snap > pcaplink.MaxSnapLen) {
		return c, fmt.Errorf("--pcap-snaplen %d: 0 (whole datagrams) or in [%d, %d]", f.snap, pcaplink.MinSnapLen, pcaplink.MaxSnapLen)
	}
	return c, nil
}

// pcapConfig is what startCapture opens.
type pcapConfig struct {
	file string
	cfg  pcaplink.Config
}

// startCapture creates the capture file and has ndk.Open wrap every engine's link in it.
// It does nothing without --pcap.
func (n *node) startCapture(opts *ndk.Options) error {
	c := n.cfg.pcap
	if c.file == "" {
		return nil
	}
	cp, err := pcaplink.Create(c.file, c.cfg)
	if err != nil {
		return fail(exitFailed, "--pcap %s: %v", c.file, err)
	}
	n.capture = cp
	plumb.SetExtra(opts, plumb.Extra{WrapLink: func(l link.Link, engine int) (link.Link, error) {
		return cp.Wrap(l, fmt.Sprintf("%s engine %d", n.cfg.iface, engine))
	}})
	return nil
}

// stopCapture closes the capture file, once the adapter is closed (every datagram of its
// engines is in the rings), and says on stderr (stdout may be a --json document) what it
// holds.
func (n *node) stopCapture() {
	w := os.Stderr
	if n.capture == nil {
		return
	}
	st, err := n.capture.Close()
	n.capture = nil
	if err != nil {
		fmt.Fprintf(w, "ndkpeer: --pcap %s: %v (the file is incomplete)\n", n.cfg.pcap.file, err)
	}
	drops := ""
	if st.Dropped > 0 {
		drops = " (a capture ring was full: raise --pcap-buffer, or lower --pcap-snaplen)"
	}
	fmt.Fprintf(w, "ndkpeer: --pcap %s: %d datagrams written (%s as sent and received), %d dropped%s\n",
		n.cfg.pcap.file, st.Packets, humanBytes(st.Bytes), st.Dropped, drops)
}
