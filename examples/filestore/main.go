package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xdpndk/xdpndk/ndk"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the operation failed: the message says why (an NTSTATUS names ndk's failures)
	exitUsage = 2 // bad command line
)

const usage = `usage:
  filestore serve -i IFACE [-addr ADDR:PORT] [-store-mib N] [-max-conns N] [-max-files N]
  filestore put   -i IFACE SERVER[:PORT] LOCALFILE NAME
  filestore get   -i IFACE SERVER[:PORT] NAME LOCALFILE
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		return serveCmd(args[1:], stderr)
	case "put", "get":
		return clientCmd(args[0], args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "filestore: unknown command %q\n%s", args[0], usage)
	return exitUsage
}

// serveCmd is `filestore serve`: it serves until SIGINT or SIGTERM, then closes every
// connection and the adapter and exits 0.
func serveCmd(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("filestore serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	iface := fs.String("i", "", "serve on `IFACE` (required)")
	addr := fs.String("addr", fmt.Sprintf(":%d", defaultPort), "listen on `ADDR:PORT`: the interface's address (or none, \":PORT\") and the NDK port")
	storeMiB := fs.Int("store-mib", 64, "the store's size in `MiB` (pinned memory)")
	maxConns := fs.Int("max-conns", 64, "most clients at once")
	maxFiles := fs.Int("max-files", 1024, "most files in the store (PUTs in progress count)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	listen, err := parseListen(*addr)
	switch {
	case err != nil:
	case *iface == "":
		err = errors.New("-i IFACE is required")
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case *storeMiB < 1 || *storeMiB > 16<<10 || int64(*storeMiB)<<20 > math.MaxInt/2:
		err = fmt.Errorf("-store-mib %d: not in [1, 16384] (or too large for this platform)", *storeMiB)
	case *maxConns < 1 || *maxConns > 1024:
		err = fmt.Errorf("-max-conns %d: not in [1, 1024]", *maxConns)
	case *maxFiles < 1 || *maxFiles > 1<<20:
		err = fmt.Errorf("-max-files %d: not in [1, 1048576]", *maxFiles)
	}
	if err != nil {
		fmt.Fprintf(stderr, "filestore serve: %v\n%s", err, usage)
		return exitUsage
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := serverConfig{listen: listen, storeSize: *storeMiB << 20, maxConns: *maxConns, maxFiles: *maxFiles}
	// The heap holds the store and every connection's control buffers (a page each).
	a, err := openAdapter(*iface, cfg.storeSize+cfg.maxConns*8192+1<<20, log)
	if err != nil {
		fmt.Fprintf(stderr, "filestore serve: %v\n", err)
		return exitFail
	}
	defer closeAdapter(a)
	srv, err := newServer(a, cfg, log)
	if err == nil {
		if err = srv.start(ctx); err != nil {
			srv.stop()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "filestore serve: %v\n", err)
		return exitFail
	}
	at := srv.ln.LocalAddr()
	if !at.Addr().IsValid() || at.Addr().IsUnspecified() {
		at = netip.AddrPortFrom(a.LocalAddr().Addr(), at.Port())
	}
	log.Info("listening", "addr", at, "interface", *iface, "udp_port", a.LocalAddr().Port(), "store_bytes", cfg.storeSize)
	<-ctx.Done()
	log.Info("stopping")
	srv.stop()
	files, _, _ := srv.store.usage()
	log.Info("stopped", "files", files)
	return exitOK
}

// clientCmd is `filestore put` and `filestore get`.
func clientCmd(cmd string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("filestore "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	iface := fs.String("i", "", "use `IFACE` (required)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	var err error
	var server netip.AddrPort
	switch {
	case *iface == "":
		err = errors.New("-i IFACE is required")
	case fs.NArg() != 3:
		err = fmt.Errorf("want 3 arguments, got %d", fs.NArg())
	default:
		server, err = parseServer(fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(stderr, "filestore %s: %v\n%s", cmd, err, usage)
		return exitUsage
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := openAdapter(*iface, clientHeap, log)
	if err != nil {
		fmt.Fprintf(stderr, "filestore %s: %v\n", cmd, err)
		return exitFail
	}
	defer closeAdapter(a)
	var st transferStats
	var name string
	if cmd == "put" {
		name = fs.Arg(2)
		st, err = put(ctx, a, server, fs.Arg(1), name)
	} else {
		name = fs.Arg(1)
		st, err = get(ctx, a, server, name, fs.Arg(2))
	}
	if err != nil {
		fmt.Fprintf(stderr, "filestore %s: %v\n", cmd, err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s %s: %v\n", cmd, name, st)
	return exitOK
}

// closeAdapter closes a, bounded: Close disconnects what is still connected and waits
// for the peers' answers at most that long.
func closeAdapter(a *ndk.Adapter) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.Close(ctx)
}

// parseListen parses -addr: ADDR:PORT, or :PORT for any of the adapter's addresses.
func parseListen(s string) (netip.AddrPort, error) {
	if p, ok := strings.CutPrefix(s, ":"); ok {
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("-addr %q: bad port", s)
		}
		return netip.AddrPortFrom(netip.Addr{}, uint16(port)), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("-addr %q: want ADDR:PORT or :PORT", s)
	}
	return ap, nil
}

// parseServer parses SERVER[:PORT]: an IP address, with the port defaultPort if none is
// given ([ADDR]:PORT for IPv6).
func parseServer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("server %q: want an IP address, with :PORT or without", s)
	}
	return netip.AddrPortFrom(addr, defaultPort), nil
}
