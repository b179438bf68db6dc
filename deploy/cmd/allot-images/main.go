// Command allot-images writes Allot's OCI images as OCI image layouts, one
// directory an image, and prints their digests; with -build it first
// builds the artifacts they hold. It only wires flags to deploy/images.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/allotmesh/allot/deploy/images"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("allot-images", flag.ContinueOnError)
	out := fs.String("out", "bin/images", "`directory` of the layouts, one per image: <out>/allotd, <out>/allotctl, <out>/allot-wasm, <out>/allot-native")
	bin := fs.String("bin", "bin/images-build", "`directory` of the artifacts: allotd, allotctl, allot.wasm, liballot.so")
	build := fs.Bool("build", false, "build the artifacts into -bin first (go build from -root, reproducible flags)")
	root := fs.String("root", ".", "the repository's root `directory`, for -build")
	var o images.Options
	fs.StringVar(&o.Version, "version", "dev", "org.opencontainers.image.version and the layouts' tag")
	fs.StringVar(&o.Revision, "revision", "", "org.opencontainers.image.revision: the commit")
	fs.StringVar(&o.Source, "source", images.DefaultSource, "org.opencontainers.image.source")
	epoch := fs.Int64("source-date-epoch", 0, "every timestamp in the images, in seconds since 1970 (the commit's time)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Bin, o.Created = *bin, time.Unix(*epoch, 0)
	if *build {
		if err := (images.Build{Root: *root, Out: *bin, Log: os.Stderr}).Run(ctx); err != nil {
			return err
		}
	}
	imgs, err := images.Images(o)
	if err != nil {
		return err
	}
	written, err := images.WriteLayouts(*out, o.Version, imgs)
	for _, w := range written {
		fmt.Printf("%-13s %s %s\n", w.Name, w.Digest, w.Dir)
	}
	return err
}
