package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/allotmesh/allot/control-plane/migrate"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/store/etcd"
)

const migrateUsage = `Usage: allotd migrate -db allot.db -store etcd://host:2379[,host:2379...] [flags]

Copies every experiment and its whole audit history, revisions unchanged,
from the bbolt file of a single allotd into an empty etcd prefix, then reads
both back and compares them. Stop the allotd using the file first; the file
is opened read-only and never changed. allotd refuses to start on the prefix
until the copy is verified; a copy that fails midway is removed and started
again by the next run.

Flags:
`

// Migrate runs "allotd migrate": it copies the bbolt file -db into the
// empty etcd prefix of -store and verifies the copy (migrate.Copy into
// etcd.Store.Import), and prints a summary to stdout.
func Migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("allotd migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), migrateUsage)
		fs.PrintDefaults()
	}
	var (
		dbPath   string
		storeURL string
		etcdOpts etcdFlags
	)
	fs.StringVar(&dbPath, "db", "", "the bbolt store `file` to copy (required; opened read-only: no allotd may run on it)")
	fs.StringVar(&storeURL, "store", "", "the etcd cluster to copy into, etcd://host:port[,host:port...] (required); -etcd-prefix must hold no store")
	etcdOpts.register(fs)
	if err := fs.Parse(args); err != nil {
		return helpIsNoError(err)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("migrate: unexpected arguments: %v", fs.Args())
	case dbPath == "":
		return errors.New("migrate: -db is required: the bbolt file to copy")
	case storeURL == "":
		return errors.New("migrate: -store is required: the etcd cluster to copy into (etcd://host:port,...)")
	}
	cc, err := etcdOpts.clientConfig(storeURL)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	src, err := bolt.Open(dbPath, bolt.WithReadOnly())
	if errors.Is(err, bolt.ErrLocked) {
		return fmt.Errorf("migrate: %w: is allotd still running on it? Stop it first: migrate copies a file nothing writes", err)
	}
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer src.Close()
	dst, err := etcd.Open(ctx, cc, etcd.WithPrefix(etcdOpts.prefix), etcd.WithRequestTimeout(etcdOpts.timeout), etcd.ForImport())
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer dst.Close()
	if u := dst.Unfinished(); u != nil {
		fmt.Fprintf(stderr, "allotd migrate: %s did not finish: removing what it wrote and starting again\n", u)
	}
	sum, err := migrate.Copy(ctx, src, dst, dbPath)
	switch {
	case errors.Is(err, etcd.ErrNotEmpty):
		return fmt.Errorf("migrate: %w; migrate only into an empty prefix: choose another -etcd-prefix, or delete this one if nothing in it is needed (etcdctl del --prefix %s)", err, etcdOpts.prefix)
	case err != nil:
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintf(stdout, "migrated %s from %s to %s prefix %s\n", sum, dbPath, dst.Name(), etcdOpts.prefix)
	return nil
}
