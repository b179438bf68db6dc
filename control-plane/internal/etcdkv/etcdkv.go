// Package etcdkv is the etcd session the control plane's etcd adapters
// share: one client and one key prefix, the request timeout and its
// require-leader context, the classification of the client's errors into
// the store's sentinels, reads that fall back to a serializable read when
// the cluster has no quorum, and the watches that end when the session
// closes.
//
// The adapters divide the prefix between them:
//
//	meta/, experiments/, history/, key_history/   the experiment store (control-plane/store/etcd)
//	mesh/                                         the replicas' registry (control-plane/rollout/etcd)
//	outcomes/                                     the replicas' outcome records (control-plane/outcomes/etcd)
//
// The experiment store opens and closes the session (store/etcd.Store.Conn
// hands it to the others); the outcome records read two keys of the others'
// layouts, RevisionKey and ReplicasPrefix.
//
// It imports only the etcd client and control-plane/store (for its
// sentinel errors); nothing but the etcd adapters and allotd's wiring
// imports it.
package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allotmesh/allot/control-plane/store"
)

// Keys of one adapter's layout that another reads.
const (
	// RevisionKey holds the experiment store's revision, decimal; the
	// outcome records' Sweep compares it.
	RevisionKey = "meta/revision"
	// ReplicasPrefix holds a record per live replica of the registry; the
	// outcome records' Read lists the live replicas from it.
	ReplicasPrefix = "mesh/replicas/"
)

// Bounds of one transaction, under etcd's defaults.
const (
	// MaxTxnOps stays under etcd's default --max-txn-ops (128).
	MaxTxnOps = 100
	// MaxTxnBytes bounds the keys and values of one transaction, under
	// etcd's default --max-request-bytes (1.5 MiB).
	MaxTxnBytes = 1 << 20
)

// Conn is one client under one prefix; create it with New.
type Conn struct {
	cli     *clientv3.Client
	name    string
	prefix  string
	timeout time.Duration

	closed  atomic.Bool
	stop    context.CancelFunc // cancels every watch
	stopCtx context.Context
	watches sync.WaitGroup
}

// New returns the session of cli under prefix, bounding each call by
// timeout; name names the cluster in errors ("etcd" and its endpoints).
func New(cli *clientv3.Client, prefix string, timeout time.Duration) *Conn {
	c := &Conn{cli: cli, prefix: prefix, timeout: timeout, name: "etcd " + strings.Join(cli.Endpoints(), ",")}
	c.stopCtx, c.stop = context.WithCancel(context.Background())
	return c
}

// Client is the session's etcd client.
func (c *Conn) Client() *clientv3.Client { return c.cli }

// Name names the cluster in errors and logs: "etcd" and its endpoints.
func (c *Conn) Name() string { return c.name }

// Prefix is the session's key prefix.
func (c *Conn) Prefix() string { return c.prefix }

// Key is the prefix followed by parts.
func (c *Conn) Key(parts ...string) string { return c.prefix + strings.Join(parts, "") }

// Closed reports whether Close was called.
func (c *Conn) Closed() bool { return c.closed.Load() }

// Close ends every watch and waits for them; it reports whether this call
// closed the session (false: it was closed already). The client stays open.
func (c *Conn) Close() bool {
	if c.closed.Swap(true) {
		return false
	}
	c.stop()
	c.watches.Wait()
	return true
}

// Context ends when the session closes (a lease's keep-alive runs under it).
func (c *Conn) Context() context.Context { return c.stopCtx }

// Go runs run in a goroutine with a context that ends with ctx or when the
// session closes, which waits for it; it reports false, running nothing,
// if the session is closed or ctx done.
func (c *Conn) Go(ctx context.Context, run func(ctx context.Context)) bool {
	if c.closed.Load() || ctx.Err() != nil {
		return false
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.stopCtx, cancel)
	c.watches.Add(1)
	go func() {
		defer c.watches.Done()
		defer stop()
		defer cancel()
		run(wctx)
	}()
	return true
}

// Pad is n zero-padded to 20 digits, so that keys sort by it.
func Pad(n int64) string { return fmt.Sprintf("%020d", n) }

// OpContext bounds one call to the cluster (deadline), and makes it fail
// rather than wait when the member it reaches has no leader.
func (c *Conn) OpContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(ctx, c.Deadline(ctx))
	return clientv3.WithRequireLeader(ctx), cancel
}

// Deadline is when a call to the cluster made now under ctx must end: the
// request timeout from now, or from the start of the write ctx belongs to
// (store.WithWrite), so that a write's reads and its commit share one
// timeout (a write whose first read waits out a lost quorum answered after
// twice the timeout otherwise).
func (c *Conn) Deadline(ctx context.Context) time.Time {
	if start, ok := store.WriteStart(ctx); ok {
		return start.Add(c.timeout)
	}
	return time.Now().Add(c.timeout)
}

// Check refuses calls on a closed session or with a done context.
func (c *Conn) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// Wrap classifies an error of the client: the caller's own cancellation,
// a closed session, a cluster that cannot serve (store.ErrUnavailable,
// naming the cluster), a request etcd or its client refuses as too large
// (store.ErrInvalid).
func (c *Conn) Wrap(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case c.closed.Load():
		return fmt.Errorf("%w: %w", store.ErrClosed, err)
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ctx.Err()
	case errors.Is(err, rpctypes.ErrGRPCRequestTooLarge), errors.Is(err, rpctypes.ErrRequestTooLarge), clientTooLarge(err):
		return fmt.Errorf("%w: %s refuses the request as too large: %w", store.ErrInvalid, c.name, err)
	case unavailable(err) || ctx.Err() != nil:
		return fmt.Errorf("%w: %s: %w", store.ErrUnavailable, c.name, err)
	}
	return fmt.Errorf("%s: %w", c.name, err)
}

// clientTooLarge reports whether err is the gRPC client's refusal to send
// a message over its limit (clientv3.Config.MaxCallSendMsgSize, 2 MiB by
// default); etcd's own ResourceExhausted errors (a full database) are not.
func clientTooLarge(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max")
}

// unavailable reports whether err says the cluster cannot serve now.
func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, e := range []error{rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex,
		rpctypes.ErrGRPCNoLeader, rpctypes.ErrGRPCLeaderChanged, rpctypes.ErrGRPCTimeout,
		rpctypes.ErrGRPCTimeoutDueToLeaderFail, rpctypes.ErrGRPCTimeoutDueToConnectionLost, rpctypes.ErrGRPCNotCapable} {
		if errors.Is(err, e) || err.Error() == e.Error() {
			return true
		}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// Get is one read of Read: a key, every key under a prefix, or the keys
// from key to end (excluded); only the keys if keysOnly; at most limit
// keys if limit > 0; as the store held them at revision rev if rev > 0.
type Get struct {
	Key      string
	Prefix   bool
	End      string
	KeysOnly bool
	Limit    int64
	Rev      int64
}

// Op is g as an etcd operation, a serializable read if serializable.
func (g Get) Op(serializable bool) clientv3.Op {
	var opts []clientv3.OpOption
	if g.Prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	if g.End != "" {
		opts = append(opts, clientv3.WithRange(g.End))
	}
	if g.KeysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	if g.Limit > 0 {
		opts = append(opts, clientv3.WithLimit(g.Limit))
	}
	if g.Rev > 0 {
		opts = append(opts, clientv3.WithRev(g.Rev))
	}
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	return clientv3.OpGet(g.Key, opts...)
}

// Read runs gets in one read-only transaction, so they see one state.
// When the cluster cannot serve a linearizable read (no quorum), it falls
// back to the member's last committed state: a serializable read, answered
// without a quorum.
func (c *Conn) Read(ctx context.Context, gets ...Get) (*clientv3.TxnResponse, error) {
	if err := c.Check(ctx); err != nil {
		return nil, err
	}
	ops := make([]clientv3.Op, len(gets))
	for i, g := range gets {
		ops[i] = g.Op(false)
	}
	octx, cancel := c.OpContext(ctx)
	resp, err := c.cli.Txn(octx).Then(ops...).Commit()
	err = c.Wrap(octx, err)
	cancel()
	if err == nil || !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
		return resp, err
	}
	for i, g := range gets {
		ops[i] = g.Op(true)
	}
	sctx, cancel := context.WithDeadline(ctx, c.Deadline(ctx))
	defer cancel()
	resp, serr := c.cli.Txn(sctx).Then(ops...).Commit()
	if serr != nil {
		return nil, err
	}
	return resp, nil
}
