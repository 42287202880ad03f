// Command bench measures Herald against baselines on the local PostgreSQL. Each
// suite prints a Markdown table; the figures go to BENCHMARKS.md.
//
//	go run ./internal/bench write [-writers 8] [-duration 4s] [-rounds 7]
//	go run ./internal/bench relay [-events 100000] [-publishers gochannel,nats]
//	go run ./internal/bench latency [-rate 1000] [-duration 10s]
//	go run ./internal/bench inbox [-workers 8] [-duration 4s] [-rounds 3]
//	go run ./internal/bench wal [-parts write,burn,latency] [-sizes 100000,1000000]
//	go run ./internal/bench schedule-latency [-db postgres] [-rate 1000] [-delay 2s] [-duration 10s] [-wake=false] [-poll 1s]
//	go run ./internal/bench relay -scheduled 1000000 [-db postgres] [-events 100000] [-rounds 3]
//	go run ./internal/bench fleet [-db postgres] [-parts burn,idle,fair] [-tenants 1000] [-events 100] [-duration 30s] [-hot 1000000]
//	go run ./internal/bench fleet -parts scale [-db postgres] [-tenants 1000] [-events 100] [-processes 1,2,4] [-member-ttl 3s]
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var err error
	switch os.Args[1] {
	case "write":
		err = runWrite(fs, os.Args[2:])
	case "relay":
		err = runRelay(fs, os.Args[2:])
	case "inbox":
		err = runInbox(fs, os.Args[2:])
	case "latency":
		err = runLatency(fs, os.Args[2:])
	case "wal":
		err = runWAL(fs, os.Args[2:])
	case "schedule-latency":
		err = runScheduleLatency(fs, os.Args[2:])
	case "fleet":
		err = runFleet(fs, os.Args[2:])
	case "fleet-writer":
		err = runFleetWriter()
	case "fleet-member":
		err = runFleetMember()
	case "latency-child":
		err = runLatencyChild()
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: go run ./internal/bench write|relay|latency|inbox|wal|schedule-latency|fleet [flags]")
	os.Exit(2)
}
