// Command glint-floor is the physical floor of an executor's launch: run as
// `glint-floor -child PROTOCOL URL` it makes two round trips to URL over
// loopback, HTTP/1.1 or h2c, and exits (make bench forks it as the floor's
// child); run as `glint-floor [-n N]` it is also the parent, launching itself
// N times over each protocol and printing the p50 and p99 of fork/exec →
// second request received; run as
// `glint-floor -serve` it serves the heartbeat floor (a bare HTTP/1.1 server
// and a framed TCP one) on two loopback ports until its standard input ends,
// printing their URLs on its first two lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/glint-cluster/glint/internal/floor"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == floor.ChildFlag {
		if err := floor.Child(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 2 && os.Args[1] == floor.ServeFlag {
		if err := serve(); err != nil {
			fmt.Fprintln(os.Stderr, "glint-floor:", err)
			os.Exit(1)
		}
		return
	}
	n := flag.Int("n", 50, "launches to measure")
	flag.Parse()
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "glint-floor: -n must be at least 1")
		os.Exit(2)
	}
	if err := parent(*n); err != nil {
		fmt.Fprintln(os.Stderr, "glint-floor:", err)
		os.Exit(1)
	}
}

// serve is the heartbeat floor until its standard input ends: its parent's
// death ends it.
func serve() error {
	errc := make(chan error, 2)
	go func() { errc <- floor.ServeFloors(os.Stdout) }()
	go func() {
		_, err := io.Copy(io.Discard, os.Stdin)
		errc <- err
	}()
	return <-errc
}

func parent(n int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	f, err := floor.New(self)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, protocol := range []string{floor.HTTP1, floor.H2C} {
		var ds []time.Duration
		for range n {
			d, err := f.Launch(context.Background(), protocol)
			if err != nil {
				return err
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		fmt.Printf("floor over %d launches, %s: p50 %v, p99 %v\n", n, protocol, ds[n/2], ds[n*99/100])
	}
	return nil
}
