package command

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
)

// TestMainRun: run gets the arguments and a live context; its error is
// printed with the command's name and returned.
func TestMainRun(t *testing.T) {
	var got []string
	var stderr bytes.Buffer
	err := main("tool", func(ctx context.Context, args []string) error {
		got = args
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("no luck")
	}, []string{"-x", "1"}, &stderr)
	if err == nil || err.Error() != "no luck" {
		t.Errorf("main = %v, want run's error", err)
	}
	if !slices.Equal(got, []string{"-x", "1"}) {
		t.Errorf("run got %q", got)
	}
	if stderr.String() != "tool: no luck\n" {
		t.Errorf("stderr %q", stderr.String())
	}
	stderr.Reset()
	if err := main("tool", func(context.Context, []string) error { return nil }, nil, &stderr); err != nil || stderr.Len() != 0 {
		t.Errorf("a run without error: %v, stderr %q", err, stderr.String())
	}
}
