// Command allot-xdsload simulates N Envoy proxies on an allotd xDS address:
// they subscribe to the allot ECDS resource and ACK like Envoy. Each time
// all of them have acknowledged a new version it prints how long that took
// from the first response to the last ACK (p50/p99). Trigger versions with
// allotctl (or any admin API write) while it runs.
//
// With -report-interval, each proxy (one connection each) also exports
// outcome stats of -report-experiments as Envoy's OpenTelemetry stat sink
// does, from SIGUSR1 on; SIGUSR2 stops the exports, waits for those in
// flight and prints "exports stopped: <n> taken, <m> refused".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/allotmesh/allot/control-plane/xds/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "allot-xdsload:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("allot-xdsload", flag.ContinueOnError)
	var cfg loadgen.Config
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:18000", "allotd xDS address")
	fs.IntVar(&cfg.Clients, "clients", 1000, "simulated proxies (streams)")
	fs.IntVar(&cfg.Conns, "conns", 0, "gRPC connections shared by the streams (0: one per proxy; at least one per 16 streams, allotd's bound)")
	fs.StringVar(&cfg.Cluster, "cluster", "loadtest", "node cluster of every proxy")
	fs.StringVar(&cfg.Node, "node", "", "node id prefix, <node>-<i> (default: -cluster); fleets on several replicas need one each")
	fs.BoolVar(&cfg.ECDS, "ecds", false, "use the ECDS service instead of ADS")
	resourceOut := fs.String("resource-out", "", "after every version reached every proxy, write the first proxy's last response (a binary DiscoveryResponse) to this file, replaced atomically")
	versions := fs.Int("versions", 0, "exit after this many versions reached every proxy (0: run until interrupted)")
	var r loadgen.Report
	fs.DurationVar(&r.Interval, "report-interval", 0, "export outcome stats every interval from SIGUSR1 to SIGUSR2 (0: never); needs -conns 0")
	exps := fs.String("report-experiments", "", "comma-separated observed experiments the exports cover")
	fs.IntVar(&r.Variations, "report-variations", 2, "variations of each reported experiment")
	fs.Int64Var(&r.Revision, "report-revision", 1, "assignment revision of the reported experiments (1: as created)")
	fs.Uint64Var(&r.Requests, "report-requests", 10, "responses per variation in each export")
	fs.Uint64Var(&r.ErrorsPerMille, "report-errors-permille", 100, "5xx among them, per mille")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if r.Interval > 0 {
		r.Experiments = strings.Split(*exps, ",")
		cfg.Report = &r
	}
	f, err := loadgen.Connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Printf("%d proxies connected to %s (cluster %s)\n", cfg.Clients, cfg.Addr, cfg.Cluster)
	if cfg.Report != nil {
		sig := make(chan os.Signal, 2)
		signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
		go func() {
			for s := range sig {
				if s == syscall.SIGUSR1 {
					f.Report()
					fmt.Println("exports started")
					continue
				}
				f.StopReport()
				fmt.Printf("exports stopped: %d taken, %d refused\n", f.Exported.Load(), f.Refused.Load())
			}
		}()
	}
	for n := 0; *versions == 0 || n < *versions; n++ {
		select {
		case r := <-f.Results():
			fmt.Println(r)
			if *resourceOut != "" {
				if err := writeResponse(*resourceOut, f.Latest()); err != nil {
					return err
				}
			}
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// writeResponse writes resp to path through a temporary file and a rename,
// so that a reader never sees half of it.
func writeResponse(path string, resp *discoveryv3.DiscoveryResponse) error {
	b, err := proto.Marshal(resp)
	if err != nil {
		return fmt.Errorf("-resource-out: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("-resource-out: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("-resource-out: %w", err)
	}
	return nil
}
