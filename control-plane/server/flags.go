package server

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/translate"
)

// Main parses allotd's command line and runs the server until ctx is done.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("allotd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg       Config
		tokens    string
		wasmPath  string
		logLevel  slog.Level
		logFormat string
	)
	fs.StringVar(&cfg.AdminAddr, "admin-addr", "127.0.0.1:8080", "admin API listen address (HTTP/JSON)")
	fs.StringVar(&cfg.XDSAddr, "xds-addr", "127.0.0.1:18000", "xDS listen address (gRPC: ADS and ECDS)")
	fs.StringVar(&cfg.DBPath, "db", "allot.db", "bbolt store file (created if missing)")
	fs.StringVar(&tokens, "tokens", "", "admin API tokens file (JSON: {\"tokens\":[{\"name\",\"token\",\"role\",\"namespaces\"}]}); required")
	fs.StringVar(&wasmPath, "wasm-path", "bin/allot.wasm", "path of the Allot filter module as the proxies see it")
	fs.StringVar(&cfg.Mesh.UnitHeader, "unit-header", "", "request header carrying the unit id (default x-user-id)")
	fs.StringVar(&cfg.Mesh.HeaderPrefix, "header-prefix", "", "prefix of assignment headers (default x-experiment-)")
	fs.TextVar(&logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn, error")
	fs.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if tokens == "" {
		return fmt.Errorf("-tokens is required: every admin API call is authenticated")
	}
	t, err := admin.LoadTokens(tokens)
	if err != nil {
		return err
	}
	cfg.Tokens = t
	abs, err := filepath.Abs(wasmPath)
	if err != nil {
		return fmt.Errorf("-wasm-path: %w", err)
	}
	cfg.Mesh = translate.Mesh{WasmPath: abs, UnitHeader: cfg.Mesh.UnitHeader, HeaderPrefix: cfg.Mesh.HeaderPrefix}
	opts := &slog.HandlerOptions{Level: logLevel}
	switch logFormat {
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, opts))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(stderr, opts))
	default:
		return fmt.Errorf("-log-format: %q, want text or json", logFormat)
	}
	return Run(ctx, cfg)
}
