package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// The online subcommands (apply, get, list, delete, start, pause, stop,
// history, eval --server) talk to allotd's HTTP/JSON admin API. They find
// the server and the token in this order: flags (--server, --token), the
// environment (ALLOT_SERVER, ALLOT_TOKEN), then the config file (--config,
// default $XDG_CONFIG_HOME/allot/config.json, i.e. ~/.config/allot/config.json).

// Environment variables the online subcommands read.
const (
	envServer = "ALLOT_SERVER"
	envToken  = "ALLOT_TOKEN"
)

// fileConfig is the config file's shape.
type fileConfig struct {
	// Server is the admin API's base URL, e.g. http://127.0.0.1:8080.
	Server string `json:"server"`
	// Token is the bearer token.
	Token string `json:"token"`
}

// connFlags are the flags every online subcommand takes.
type connFlags struct {
	server string
	token  string
	config string
	output string
}

// addConnFlags registers the connection flags on fs, and -o if output.
func addConnFlags(fs *flag.FlagSet, output bool) *connFlags {
	c := &connFlags{output: "table"}
	fs.StringVar(&c.server, "server", "", "admin API `URL` (default $"+envServer+", then the config file)")
	fs.StringVar(&c.token, "token", "", "bearer `token` (default $"+envToken+", then the config file)")
	fs.StringVar(&c.config, "config", "", "config `file` with {\"server\", \"token\"} (default ~/.config/allot/config.json)")
	if output {
		fs.StringVar(&c.output, "o", "table", "output `format`: table, json or yaml")
	}
	return c
}

// client returns the API client the flags, environment and config file
// describe.
func (c *connFlags) client() (*client, error) {
	switch c.output {
	case "table", "json", "yaml":
	default:
		return nil, fmt.Errorf("%w: -o %q, want table, json or yaml", ErrUsage, c.output)
	}
	server, token := c.server, c.token
	if server == "" {
		server = os.Getenv(envServer)
	}
	if token == "" {
		token = os.Getenv(envToken)
	}
	if server == "" || token == "" {
		fc, err := readFileConfig(c.config)
		if err != nil {
			return nil, err
		}
		if server == "" {
			server = fc.Server
		}
		if token == "" {
			token = fc.Token
		}
	}
	if server == "" {
		return nil, fmt.Errorf("%w: no server: pass --server, set %s or write \"server\" in the config file", ErrUsage, envServer)
	}
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	return &client{base: strings.TrimRight(server, "/"), token: token, http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// readFileConfig reads path, or the default config file if path is empty
// (a missing default file is an empty configuration).
func readFileConfig(path string) (fileConfig, error) {
	var fc fileConfig
	explicit := path != ""
	if !explicit {
		dir, err := os.UserConfigDir()
		if err != nil {
			return fc, nil
		}
		path = filepath.Join(dir, "allot", "config.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			return fc, nil
		}
		return fc, fmt.Errorf("read config: %w", err)
	}
	if err := decodeStrict(b, &fc); err != nil {
		return fc, fmt.Errorf("config %s: %w", path, err)
	}
	return fc, nil
}

// decodeStrict decodes JSON into v, rejecting unknown fields.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}

// client calls the admin API.
type client struct {
	base  string
	token string
	http  *http.Client
}

// apiError is an error answer of the admin API.
type apiError struct {
	Status  int
	Code    string
	Message string
	Details []string
}

func (e *apiError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s (%d %s)", e.Message, e.Status, e.Code)
	for _, d := range e.Details {
		sb.WriteString("\n  " + d)
	}
	return sb.String()
}

// do sends one request with a JSON body (nil: none) and returns the
// response body of a 2xx answer; other answers are *apiError.
func (c *client) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		return b, nil
	}
	var eb struct {
		Error struct {
			Code    string   `json:"code"`
			Message string   `json:"message"`
			Details []string `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
		return nil, &apiError{Status: resp.StatusCode, Code: "unknown", Message: strings.TrimSpace(string(b))}
	}
	return nil, &apiError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, Details: eb.Error.Details}
}

// isStatus reports whether err is an API answer with HTTP status code.
func isStatus(err error, code int) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == code
}

// writeData prints a JSON document as indented JSON or as YAML.
func writeData(w io.Writer, format string, data []byte) error {
	var out []byte
	switch format {
	case "yaml":
		y, err := yaml.JSONToYAML(data)
		if err != nil {
			return fmt.Errorf("render yaml: %w", err)
		}
		out = y
	default:
		var buf bytes.Buffer
		if err := json.Indent(&buf, bytes.TrimSpace(data), "", "  "); err != nil {
			return fmt.Errorf("render json: %w", err)
		}
		buf.WriteByte('\n')
		out = buf.Bytes()
	}
	_, err := w.Write(out)
	return err
}

// parseFlags parses args into fs, allowing flags after positional
// arguments (allotctl get KEY -o yaml), and returns the positional ones. It
// returns ok false after printing usage for -h. Between minArgs and maxArgs
// positional arguments are allowed.
func parseFlags(fs *flag.FlagSet, args []string, minArgs, maxArgs int) (pos []string, ok bool, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("%w: %v", ErrUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if n := len(pos); n < minArgs || n > maxArgs {
		return nil, false, fmt.Errorf("%w: %s takes %s, got %q", ErrUsage, fs.Name(), argCount(minArgs, maxArgs), pos)
	}
	return pos, true, nil
}

func argCount(minArgs, maxArgs int) string {
	switch {
	case minArgs == maxArgs && minArgs == 1:
		return "one argument"
	case minArgs == 0 && maxArgs == 1:
		return "at most one argument"
	case maxArgs == 0:
		return "no arguments"
	}
	return fmt.Sprintf("%d to %d arguments", minArgs, maxArgs)
}
