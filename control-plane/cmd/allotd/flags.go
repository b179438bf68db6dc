package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/guardian"
	"github.com/allotmesh/allot/control-plane/mtls"
	"github.com/allotmesh/allot/control-plane/server"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/control-plane/xds"
)

const usage = `Usage:
  allotd [flags]          run the control plane
  allotd migrate [flags]  copy a bbolt file's experiments and history into etcd (allotd migrate -h)

Flags:
`

// flags are allotd's command-line flags: those that go into server.Config
// as they are, and those read or checked first.
type flags struct {
	cfg       server.Config
	dbPath    string
	tokens    string
	wasmPath  string
	native    string
	meshFile  string
	keysFile  string
	logLevel  slog.Level
	logFormat string
	pprofAddr string
	tlsFiles  mtls.Files
	tlsReload time.Duration
	storeURL  string
	etcd      etcdFlags
}

// Main parses allotd's command line and runs the server until ctx is done,
// or runs the subcommand "allotd migrate" (see Migrate). -h prints the
// usage to stderr and returns nil.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "migrate" {
		return Migrate(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("allotd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	var f flags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return helpIsNoError(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg, err := f.config(stderr)
	if err != nil {
		return err
	}
	if f.tlsFiles.Cert != "" {
		r, err := mtls.Load(f.tlsFiles, cfg.Logger.With("component", "tls"))
		if err != nil {
			return err
		}
		cfg.TLS, cfg.XDSTLS = r.AdminTLS(), r.XDSTLS()
		if r.MutualTLS() {
			cfg.XDSStreamInterceptor, cfg.XDSUnaryInterceptor = r.StreamInterceptor(), r.UnaryInterceptor()
		}
		cfg.Collectors = append(cfg.Collectors, r.Collectors()...)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go r.Run(ctx, f.tlsReload)
	}
	if f.pprofAddr != "" {
		if err := servePprof(ctx, f.pprofAddr, cfg.Logger.With("component", "pprof")); err != nil {
			return err
		}
	}
	dbSet := false
	fs.Visit(func(fl *flag.Flag) { dbSet = dbSet || fl.Name == "db" })
	if f.storeURL != "" {
		if dbSet {
			return fmt.Errorf("-db and -store exclude each other: -db is the single-machine bbolt file, -store the replicated store")
		}
		return runEtcd(ctx, f.storeURL, f.etcd, cfg)
	}
	db, err := bolt.Open(f.dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	cfg.Logger.Info("store opened", "db", f.dbPath)
	return server.Run(ctx, db, cfg)
}

// register defines allotd's flags on fs.
func (f *flags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cfg.AdminAddr, "admin-addr", "127.0.0.1:8080", "admin listen address: HTTP/JSON and gRPC admin API, /metrics, /healthz, /readyz")
	fs.StringVar(&f.cfg.AdminGRPCAddr, "admin-grpc-addr", "", "optional dedicated gRPC admin API listen address (the gRPC API is always served on -admin-addr too)")
	fs.StringVar(&f.cfg.XDSAddr, "xds-addr", "127.0.0.1:18000", "xDS listen address (gRPC: ADS and ECDS)")
	fs.DurationVar(&f.cfg.GuardianInterval, "guardian-interval", guardian.DefaultInterval, "how often allotd checks the guardrails of running experiments on their outcomes (rolling back a treatment that breaks one) and advances their ramps")
	fs.DurationVar(&f.cfg.XDSClusterGrace, "xds-cluster-grace", xds.DefaultClusterGrace, "how long a proxy cluster (service) with no proxy connected keeps its configuration snapshots before it is forgotten (built again when a proxy of it connects)")
	fs.IntVar(&f.cfg.XDSMaxStreams, "xds-max-streams", xds.DefaultMaxStreams, "how many xDS streams (one per proxy) this allotd serves at once, each counted from its first admitted request: one more is refused with RESOURCE_EXHAUSTED, so that Envoy retries or fails over to another replica; it bounds the proxies' memory in allotd (about 40 KB per stream)")
	fs.StringVar(&f.dbPath, "db", "allot.db", "bbolt store file (created if missing): the store of a single allotd")
	fs.StringVar(&f.storeURL, "store", "", "replicated store instead of -db: etcd://host:2379,host2:2379 (every replica given the same cluster serves the whole mesh)")
	f.etcd.register(fs)
	f.etcd.registerReplica(fs)
	fs.StringVar(&f.tokens, "tokens", "", "admin API tokens file (JSON: {\"tokens\":[{\"name\",\"token\",\"role\",\"namespaces\"}]}); required")
	fs.StringVar(&f.wasmPath, "wasm-path", "bin/allot.wasm", "path of the Allot Wasm filter module as the proxies running it (node metadata allot.artifact absent or \"wasm\") see it")
	fs.StringVar(&f.native, "native-path", "bin/liballot.so", "path of the Allot native filter module (Envoy dynamic module) as the proxies running it (node metadata allot.artifact \"native\") see it")
	fs.StringVar(&f.meshFile, "mesh", "", "mesh settings file: the filter settings every proxy receives (JSON, allot.filter.v1.FilterConfig without version and experiments: unitHeader, headerPrefix, dictionaryHeader, versionHeader, attributes, savedGroups, cacheSize...), checked by the filter's own decoder at start-up")
	fs.StringVar(&f.keysFile, "sticky-keys", "", "sticky cookie key `file` (JSON: {\"keys\":[{\"id\",\"secret\":\"<base64, 32+ bytes>\"}]}; the first signs, every key verifies): required when the mesh settings set stickyCookie; read at start-up")
	fs.StringVar(&f.tlsFiles.Cert, "tls-cert", "", "PEM certificate (chain) `file`: with -tls-key, every listener serves TLS only (reloaded when it changes)")
	fs.StringVar(&f.tlsFiles.Key, "tls-key", "", "PEM private key `file` of -tls-cert")
	fs.StringVar(&f.tlsFiles.ClientCA, "xds-client-ca", "", "PEM `file` of the CAs that sign proxy certificates: xDS then requires a client certificate (mutual TLS) whose identity -xds-identities allows for the node's cluster (needs -tls-cert)")
	fs.StringVar(&f.tlsFiles.Policy, "xds-identities", "", "proxy identity policy `file` (JSON): which certificate identity (SPIFFE ID or DNS name) may subscribe as which clusters, e.g. {\"proxies\":[{\"identity\":\"spiffe://example.org/cluster/{cluster}\"}]} (with -xds-client-ca)")
	fs.DurationVar(&f.tlsReload, "tls-reload", 5*time.Second, "how often the TLS files and the identity policy are checked for changes; changed ones are used for new connections and requests without a restart")
	fs.TextVar(&f.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn, error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.pprofAddr, "pprof-addr", "", "serve Go's CPU, heap and goroutine profiles (/debug/pprof/) on this loopback address (off when empty)")
}

// config reads the files the flags name (tokens, mesh settings, sticky
// keys), checks the flags that go together and returns the server's
// configuration, logging to stderr. It opens no store and no listener.
func (f *flags) config(stderr io.Writer) (server.Config, error) {
	cfg := f.cfg
	if f.tokens == "" {
		return cfg, fmt.Errorf("-tokens is required: every admin API call is authenticated")
	}
	t, err := admin.LoadTokens(f.tokens)
	if err != nil {
		return cfg, err
	}
	cfg.Tokens = t
	tf := f.tlsFiles
	switch {
	case (tf.Cert == "") != (tf.Key == ""):
		return cfg, fmt.Errorf("-tls-cert and -tls-key go together")
	case tf.Cert == "" && (tf.ClientCA != "" || tf.Policy != ""):
		return cfg, fmt.Errorf("-xds-client-ca and -xds-identities need -tls-cert and -tls-key: client certificates are verified over TLS")
	case (tf.ClientCA == "") != (tf.Policy == ""):
		return cfg, fmt.Errorf("-xds-client-ca and -xds-identities go together: the CAs verify a proxy's certificate, the policy says which clusters its identity may subscribe as")
	case f.tlsReload <= 0:
		return cfg, fmt.Errorf("-tls-reload: %v, want a positive duration", f.tlsReload)
	case cfg.XDSClusterGrace <= 0:
		return cfg, fmt.Errorf("-xds-cluster-grace: %v, want a positive duration", cfg.XDSClusterGrace)
	case cfg.GuardianInterval < 100*time.Millisecond || cfg.GuardianInterval > time.Hour:
		return cfg, fmt.Errorf("-guardian-interval: %v, want 100ms to 1h", cfg.GuardianInterval)
	case cfg.XDSMaxStreams <= 0:
		return cfg, fmt.Errorf("-xds-max-streams: %d, want a positive number", cfg.XDSMaxStreams)
	}
	if cfg.Mesh, err = f.mesh(); err != nil {
		return cfg, err
	}
	opts := &slog.HandlerOptions{Level: f.logLevel}
	switch f.logFormat {
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, opts))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(stderr, opts))
	default:
		return cfg, fmt.Errorf("-log-format: %q, want text or json", f.logFormat)
	}
	return cfg, nil
}

// mesh builds the mesh settings from -wasm-path, -native-path, -mesh
// (checked by the filter's own decoder) and -sticky-keys.
func (f *flags) mesh() (translate.Mesh, error) {
	abs, err := filepath.Abs(f.wasmPath)
	if err != nil {
		return translate.Mesh{}, fmt.Errorf("-wasm-path: %w", err)
	}
	nativeAbs, err := filepath.Abs(f.native)
	if err != nil {
		return translate.Mesh{}, fmt.Errorf("-native-path: %w", err)
	}
	m := translate.Mesh{WasmPath: abs, NativePath: nativeAbs}
	if f.meshFile != "" {
		b, err := os.ReadFile(f.meshFile)
		if err != nil {
			return m, fmt.Errorf("-mesh: %w", err)
		}
		if m.Filter, err = translate.ParseMesh(b); err != nil {
			return m, fmt.Errorf("-mesh %s: invalid mesh settings:\n%w", f.meshFile, err)
		}
	}
	sticky := m.Filter.GetStickyCookie() != nil
	switch {
	case sticky && f.keysFile == "":
		return m, fmt.Errorf("-mesh %s sets stickyCookie: -sticky-keys is required (the keys that sign the cookie)", f.meshFile)
	case !sticky && f.keysFile != "":
		return m, fmt.Errorf("-sticky-keys is given but the mesh settings (-mesh) set no stickyCookie: the keys would sign nothing")
	case sticky:
		b, err := os.ReadFile(f.keysFile)
		if err != nil {
			return m, fmt.Errorf("-sticky-keys: %w", err)
		}
		if m.StickyKeys, err = translate.ParseStickyKeys(b); err != nil {
			return m, fmt.Errorf("-sticky-keys %s: invalid key file:\n%w", f.keysFile, err)
		}
	}
	return m, nil
}

// helpIsNoError turns the flag package's answer to -h, after it printed
// the usage, into success.
func helpIsNoError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}
