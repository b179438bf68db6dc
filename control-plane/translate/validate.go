package translate

import (
	"errors"
	"strings"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/filter/engine"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// ValidationError is Validate's error: every problem of an experiment,
// each as "path: message" with the path relative to the experiment. The
// admin API answers it as invalid_argument with Details as its field
// violations.
type ValidationError struct {
	// Details lists every problem, each with its field path.
	Details []string
}

func (e *ValidationError) Error() string {
	return "invalid experiment: " + strings.Join(e.Details, "; ")
}

// Validate checks an experiment as the admin API accepts it, returning a
// *ValidationError listing every problem with its field path. The control
// plane's own fields (status, services, schedule) and every bound of the
// document are checked by package experiment (CheckFields, CheckBounds);
// the definition is checked by what a proxy runs: experiment.Definition(e)
// alone in a filter configuration with the mesh's saved groups, through
// Compile. The bounds of each service the experiment applies to depend on
// the other experiments stored; the admin API checks them on every write
// that leaves an experiment running.
func Validate(e *experimentv1.Experiment, mesh Mesh) error {
	details := experiment.CheckBounds(e)
	cfg := &filterv1.FilterConfig{Experiments: []*experimentv1.Experiment{experiment.Definition(e)}}
	if mesh.Filter != nil {
		cfg.SavedGroups = mesh.Filter.SavedGroups
	}
	if _, _, err := Compile(cfg); err != nil {
		details = append(details, fieldErrors(err, "experiments[0]")...)
	}
	details = append(details, experiment.CheckFields(e)...)
	if len(details) > 0 {
		return &ValidationError{Details: details}
	}
	return nil
}

// fieldErrors lists every error joined in err as "path: message", with
// prefix (and the dot after it) taken off the paths of *engine.FieldErrors.
func fieldErrors(err error, prefix string) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, fieldErrors(e, prefix)...)
		}
		return out
	}
	var fe *engine.FieldError
	if !errors.As(err, &fe) {
		return []string{err.Error()}
	}
	path, ok := strings.CutPrefix(fe.Path, prefix)
	if !ok {
		return []string{fe.Error()}
	}
	if path = strings.TrimPrefix(path, "."); path == "" {
		return []string{fe.Message}
	}
	return []string{path + ": " + fe.Message}
}
